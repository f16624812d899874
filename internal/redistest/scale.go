package redistest

import (
	"os"
	"strconv"
	"testing"
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

// Within runs f and fails the test if it has not returned after limit,
// instead of letting a wrong implementation hang the suite.
func Within[T any](t testing.TB, limit time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		panic("unreachable")
	}
}
