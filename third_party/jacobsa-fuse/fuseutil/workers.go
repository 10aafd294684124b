// Copyright 2026 the ferry authors. All Rights Reserved.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package fuseutil

import (
	"context"
	"sync/atomic"

	"github.com/jacobsa/fuse"
)

// maxIdleWorkers bounds the goroutines kept waiting for the next op.
const maxIdleWorkers = 64

// workers runs each op on a goroutine of its own, as upstream did with
// a go statement per op, but keeps the goroutines that finished an op
// for the next ones, up to maxIdleWorkers of them. A new goroutine
// starts on a small stack, which the op's calls then grow by copying it
// (runtime.newstack): one copy or more per op, about 7% of ferry's CPU
// while it read small files cold. A kept goroutine's stack is already
// grown. An op never waits for a worker: when none is idle, a new one
// is started for it.
type workers struct {
	handle  func(work)
	idle    chan work // unbuffered: a send succeeds only into an idle worker
	nIdle   atomic.Int32
	started atomic.Int64 // goroutines started, for tests
	live    atomic.Int32 // goroutines not yet ended, for tests
}

type work struct {
	c   *fuse.Connection
	ctx context.Context
	op  interface{}
}

func newWorkers(handle func(work)) *workers {
	return &workers{handle: handle, idle: make(chan work)}
}

// run hands w to an idle worker, or to a new one. It is called from one
// goroutine (ServeOps), and not after stop.
func (ws *workers) run(w work) {
	select {
	case ws.idle <- w:
	default:
		ws.started.Add(1)
		ws.live.Add(1)
		go ws.serve(w)
	}
}

// serve handles w, then the work handed to it while it is idle.
func (ws *workers) serve(w work) {
	defer ws.live.Add(-1)
	for {
		ws.handle(w)
		w = work{} // hold nothing while idle
		if ws.nIdle.Add(1) > maxIdleWorkers {
			ws.nIdle.Add(-1)
			return
		}
		var ok bool
		w, ok = <-ws.idle
		ws.nIdle.Add(-1)
		if !ok {
			return
		}
	}
}

// stop ends the idle workers, and those that finish their op after it.
func (ws *workers) stop() { close(ws.idle) }
