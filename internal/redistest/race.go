//go:build race

package redistest

const raceEnabled = true
