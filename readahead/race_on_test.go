//go:build race

package readahead

// raceEnabled scales heavy tests down: the race detector instruments every
// byte copied.
const raceEnabled = true
