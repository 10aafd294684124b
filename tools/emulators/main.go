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
	"os"
	"time"

	"ferry/bucket/emulator"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for _, tool := range []emulator.Tool{emulator.FakeGCS, emulator.VersityGW} {
		start := time.Now()
		bin, err := emulator.Binary(ctx, tool)
		if err != nil {
			fmt.Fprintf(os.Stderr, "emulators: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "emulators: %s@%s ready in %v: %s\n", tool.Name, tool.Version, time.Since(start).Round(time.Second), bin)
		fmt.Printf("export %s=%q\n", tool.EnvVar, bin)
	}
}
