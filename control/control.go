// Package control is ferry's control socket: how commands run outside a
// mount (`ferry warm`, `warm --check`, `ferry invalidate`) reach the
// daemon serving it, both ends. The daemon listens (Listen) and answers
// through fs.Control and the disk cache; the commands (Warm, Check,
// Invalidate) run in the caller's process, find the ferry mount of a path
// in /proc/self/mountinfo and its socket by the rules below, and
// otherwise talk to the daemon only through the mount itself (reads), so
// they work for any mount, in the background or not, and need no
// configuration.
//
// setxattr cannot carry commands (the VFS refuses it on read-only
// mounts), and answering getxattr at all costs every `ls -l` a round trip
// per entry, so the daemon listens on a unix socket, mode 0600 in a 0700
// directory, at a path derived from the mount point; with
// --control-socket elsewhere it also links the derived path to it. A
// user with no directory for it gets an abstract socket, named by uid and
// mount point, whose two ends check each other's uid. One JSON request
// per connection, one JSON response.
//
// A control socket must never act for a mount other than its own, nor
// answer a user other than the mount's and root.
package control

const (
	// maxRequest bounds what the daemon reads of a request (a path and a
	// few fields).
	maxRequest = 64 << 10
	// maxConns bounds the requests served at once; more wait to be
	// accepted.
	maxConns = 16
)

// request is what a client sends.
type request struct {
	// Op is "invalidate", "cached" or "stats".
	Op string `json:"op"`
	// Path is an object path relative to the mount, "/" for all of it.
	Path string `json:"path"`
	// Data also drops the local disk cache of the files at or under Path.
	Data bool `json:"data,omitempty"`
	// Dev is the device ("major:minor") of the mount the client means: a
	// socket path names a mount point, and the mount there may since
	// have been detached and another mounted in its place.
	Dev string `json:"dev,omitempty"`
}

// response is what the daemon answers.
type response struct {
	Error string `json:"error,omitempty"`
	// For invalidate:
	Path          string `json:"path,omitempty"`
	CacheItems    int    `json:"cache_items"`
	KernelEntries int    `json:"kernel_entries"`
	DataEntries   int    `json:"data_entries"`
	DataBytes     int64  `json:"data_bytes"`
	// For cached: bytes of the file in the disk cache, and its size;
	// NoCache when the mount has no disk cache; OpenedAhead when the mount
	// opened the file ahead of a reader that has not come yet (warm reads
	// it: the bytes cached are that reader's, not held before).
	CachedBytes int64 `json:"cached_bytes"`
	Size        int64 `json:"size"`
	NoCache     bool  `json:"no_cache,omitempty"`
	OpenedAhead bool  `json:"opened_ahead,omitempty"`
	// For stats: the mount's counters and gauges, read at At (Unix
	// nanoseconds).
	Series []series `json:"series,omitempty"`
	At     int64    `json:"at,omitempty"`
}

// OperationError is a command that ran but did not fully succeed (some
// files failed): exit status 1, like cp or rsync.
type OperationError struct{ Msg string }

func (e *OperationError) Error() string { return e.Msg }
