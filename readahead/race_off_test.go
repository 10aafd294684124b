//go:build !race

package readahead

const raceEnabled = false
