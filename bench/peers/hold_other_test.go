//go:build !linux

package peers

import "time"

// threadSleep is time.Sleep where nanosleep is not at hand: the hold's
// overshoot (BenchmarkContended) is then Go's timers' on this system.
func threadSleep(d time.Duration) { time.Sleep(d) }
