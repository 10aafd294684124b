// Command gendoc rewrites the flag section of README.md from flags.Options:
//
//	go run ./flags/gendoc            # update README.md in the current directory
//	go run ./flags/gendoc -check     # exit 1 if it is stale
//
// It only ever rewrites the text between the BEGIN/END FLAGS markers.
package main

import (
	"flag"
	"fmt"
	"os"

	"ferry/flags"
)

func main() {
	check := flag.Bool("check", false, "do not write; exit 1 if the README section is stale")
	flag.Parse()
	path := "README.md"
	if flag.NArg() > 0 {
		path = flag.Arg(0)
	}
	if err := run(path, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(path string, check bool) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := flags.UpdateSection(string(old), flags.Markdown())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if updated == string(old) {
		return nil
	}
	if check {
		return fmt.Errorf("%s: flag section is stale; run go run ./flags/gendoc", path)
	}
	return os.WriteFile(path, []byte(updated), 0o644)
}
