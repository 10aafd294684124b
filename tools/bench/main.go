// Command bench measures ferry the way training reads data, against an
// emulated remote store, and against the same bytes on local disk in the
// same run, so every figure comes with its physical limit:
//
//	go run ./tools/bench demo                 # the README's first command (root)
//	go run ./tools/bench run --out docs/bench # the full benchmark, ~15 min
//	go run ./tools/bench run --target-dir /mnt/other   # another file system, same data
//	go run ./tools/bench generate --data-dir DIR       # the dataset, to upload elsewhere
//	go run ./tools/bench cluster --out docs/bench/cluster # N nodes through a SeaweedFS tier (cluster.go)
//	go run ./tools/bench scale --out docs/bench/scale     # 10K to 1.28M files: memory, per-file cost, restart (scale.go)
//
// The store is a real emulator (versitygw or fake-gcs-server) run as a
// child process behind netem's shaping proxy; ferry is built from this
// module and run as a child with --foreground, so its peak RSS and CPU
// are its own.
//
// bench must never leave a mount or a process behind: every mount is
// unmounted and every child waited for, on errors and on SIGINT too. It
// never asserts a timing; the figures are ratios from one run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "cluster" || os.Args[1] == "scale") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		sub := clusterMain
		if os.Args[1] == "scale" {
			sub = scaleMain
		}
		code := sub(ctx, os.Args, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	opts, err := parseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "usage: bench demo|run|generate|cluster|scale [flags]; bench run -h (bench cluster -h, bench scale -h) lists the flags")
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(2)
	}
	// SIGINT/SIGTERM cancel the run; the deferred unmounts and stops
	// still run before we exit.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := execute(ctx, opts, commandLine(os.Args), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		stop()
		os.Exit(1)
	}
}

// commandLine is the command as a user would type it again: `go run`
// builds into a temporary directory, whose path means nothing to a reader.
func commandLine(argv []string) []string {
	out := append([]string{}, argv...)
	if strings.Contains(argv[0], "go-build") {
		out = append([]string{"go", "run", "./tools/bench"}, argv[1:]...)
	}
	return out
}
