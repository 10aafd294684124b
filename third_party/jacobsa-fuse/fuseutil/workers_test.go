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
	"sync"
	"testing"
	"time"
)

// An op that blocks never holds up the next one: each op in flight has
// a goroutine of its own.
func TestWorkersNeverQueue(t *testing.T) {
	release := make(chan struct{})
	var started sync.WaitGroup
	ws := newWorkers(func(w work) {
		started.Done()
		<-release
	})
	const n = 3 * maxIdleWorkers
	started.Add(n)
	handedOut := make(chan struct{})
	go func() { // a run that waited would hang here, not the test
		for i := 0; i < n; i++ {
			ws.run(work{})
		}
		close(handedOut)
	}()
	waitClosed(t, handedOut, "run to hand out every op")
	waitGroup(t, &started, "every blocked op to start")
	if got := ws.started.Load(); got != n {
		t.Errorf("goroutines started: %d, want %d (one per op in flight)", got, n)
	}
	close(release)
	ws.stop()
	waitFor(t, func() bool { return ws.live.Load() == 0 }, "stop to end every worker")
}

// Ops that come one after another are served by the goroutines kept
// from the ops before them; beyond maxIdleWorkers, finished goroutines
// end; stop ends the idle ones.
func TestWorkersAreKept(t *testing.T) {
	var done sync.WaitGroup
	ws := newWorkers(func(w work) { done.Done() })
	for i := 0; i < 10_000; i++ {
		done.Add(1)
		ws.run(work{})
		done.Wait()
	}
	// A worker counts itself idle just after its op is done, so the next
	// op may find none idle yet and start another: a few, not one per op.
	if got := ws.started.Load(); got > 100 {
		t.Errorf("10,000 ops one after another started %d goroutines", got)
	}
	ws.stop()
	waitFor(t, func() bool { return ws.live.Load() == 0 }, "stop to end the idle workers")

	release := make(chan struct{})
	var started sync.WaitGroup
	ws2 := newWorkers(func(w work) {
		started.Done()
		<-release
	})
	const n = 4 * maxIdleWorkers
	started.Add(n)
	for i := 0; i < n; i++ {
		ws2.run(work{})
	}
	waitGroup(t, &started, "every blocked op to start")
	close(release)
	waitFor(t, func() bool { return ws2.live.Load() == maxIdleWorkers },
		"finished workers beyond the idle bound to end")
	waitFor(t, func() bool { return ws2.nIdle.Load() == maxIdleWorkers }, "the kept workers to be idle")
	ws2.stop()
	waitFor(t, func() bool { return ws2.live.Load() == 0 }, "stop to end the idle workers")
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	waitClosed(t, ch, what)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
