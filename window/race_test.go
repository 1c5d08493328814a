//go:build race

package window

// raceEnabled: the race detector slows the property test tenfold; it then
// checks fewer threads (still thousands of windows).
const raceEnabled = true
