//go:build race

package readahead

// raceDetector: the race detector watches the Go heap only, so under it
// readahead buffers stay there (see mappedBuffers).
const raceDetector = true
