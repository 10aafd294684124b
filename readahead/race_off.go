//go:build !race

package readahead

const raceDetector = false
