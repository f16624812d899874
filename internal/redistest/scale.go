package redistest

import (
	"os"
	"strconv"
	"time"
)

// TimeScale stretches every liveness bound and test timing in the suites,
// so that -race and a loaded 2-core machine do not make tests flaky: 1, 4
// under -race, or REDLOCK_TIME_SCALE when set. Safety assertions never
// depend on it.
var TimeScale = func() float64 {
	if s, err := strconv.ParseFloat(os.Getenv("REDLOCK_TIME_SCALE"), 64); err == nil && s > 0 {
		return s
	}
	if raceEnabled {
		return 4
	}
	return 1
}()

// Scaled returns d stretched by TimeScale.
func Scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * TimeScale) }
