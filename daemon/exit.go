package daemon

import (
	"strconv"
	"strings"
)

// Exit statuses follow mount(8)'s helper convention, so that `mount -t
// ferry` reports them sensibly; every ferry command uses them, and the
// background child sends its own to the parent (background.go).
const (
	ExitOK         = 0
	ExitUsage      = 1  // bad flags, URL or mount point
	ExitMountError = 32 // the store, the cache or the mount itself failed
)

// UsageError marks errors caused by the command line (ExitUsage).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ReportedError is an error the background child has already sent to
// its parent, which prints it, and logged: the child prints nothing
// more (its stderr is the log file), so that the message appears once.
type ReportedError struct{ Err error }

func (e ReportedError) Error() string { return e.Err.Error() }
func (e ReportedError) Unwrap() error { return e.Err }

// ChildError is the error the background child reported, with the exit
// status it would have used itself.
type ChildError struct {
	Code int
	Msg  string
}

func (e *ChildError) Error() string { return e.Msg }

// parseChildError parses the "<code> <message>" of the child's error line.
func parseChildError(s string) *ChildError {
	code, msg, _ := strings.Cut(s, " ")
	n, err := strconv.Atoi(code)
	if err != nil || n <= 0 || n > 255 {
		return &ChildError{Code: ExitMountError, Msg: s}
	}
	return &ChildError{Code: n, Msg: msg}
}

// oneLine joins a message's lines (and runs of spaces) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
