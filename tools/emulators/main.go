// Command emulators builds the pinned object-store emulators that ferry's
// tests and benchmarks run (fake-gcs-server, versitygw) once, and prints
// shell lines exporting their paths, so a CI run builds them one time:
//
//	eval "$(go run ./tools/emulators)"
//
// It never starts a server; bucket/emulator does that.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"ferry/bucket/emulator"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "emulators: %v\n", err)
		os.Exit(1)
	}
}

// run builds (or finds) each emulator and prints an export line for it.
func run(ctx context.Context, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, "emulators: "+format+"\n", args...) }
	for _, tool := range []emulator.Tool{emulator.FakeGCS, emulator.VersityGW} {
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
