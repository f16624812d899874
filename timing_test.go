package redlock

import (
	"os"
	"strconv"
	"time"
)

// timeScale stretches every liveness bound and test timing in the suite, so
// that -race and a loaded 2-core machine do not make tests flaky. It is 1,
// 4 under -race, or REDLOCK_TIME_SCALE when set. Safety assertions never
// depend on it.
var timeScale = func() float64 {
	if s, err := strconv.ParseFloat(os.Getenv("REDLOCK_TIME_SCALE"), 64); err == nil && s > 0 {
		return s
	}
	if raceEnabled {
		return 4
	}
	return 1
}()

// scaled returns d stretched by timeScale.
func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * timeScale) }
