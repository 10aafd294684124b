// Command emulators builds the pinned object-store emulators that ferry's
// tests and benchmarks run (fake-gcs-server, versitygw) once, and prints
// shell lines exporting their paths, so a CI run builds them one time:
//
//	eval "$(go run ./tools/emulators)"
//	eval "$(go run ./tools/emulators -weed)"   # SeaweedFS too: ~8 minutes once
//
// SeaweedFS (the cache tier of e2e/TestTierServesTheSecondNode and
// `bench cluster`) is built only when asked: CI does not spend 8 minutes
// on it, and the test skips without it.
//
// It never starts a server; bucket/emulator does that.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"ferry/bucket/emulator"
)

func main() {
	weed := flag.Bool("weed", false, "also build SeaweedFS (about 8 minutes and 230 MB, once)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	tools := []emulator.Tool{emulator.FakeGCS, emulator.VersityGW}
	if *weed {
		tools = append(tools, emulator.Weed)
	}
	if err := run(ctx, tools, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "emulators: %v\n", err)
		os.Exit(1)
	}
}

// run builds (or finds) each emulator and prints an export line for it.
func run(ctx context.Context, tools []emulator.Tool, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "emulators: "+format+"\n", args...) }
	for _, tool := range tools {
		start := time.Now()
		bin, err := emulator.BinaryTelling(ctx, tool, say)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "emulators: %s@%s ready in %v: %s\n", tool.Name, tool.Version, time.Since(start).Round(time.Second), bin)
		fmt.Fprintf(stdout, "export %s=%q\n", tool.EnvVar, bin)
	}
	return nil
}
