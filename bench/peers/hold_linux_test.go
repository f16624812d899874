package peers

import (
	"syscall"
	"time"
)

// threadSleep sleeps d in nanosleep, holding the calling goroutine's
// thread: the kernel wakes it on time, where time.Sleep's wake-up waits
// on the runtime's netpoller (BenchmarkContended).
func threadSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	var rest syscall.Timespec
	for syscall.Nanosleep(&ts, &rest) == syscall.EINTR {
		ts = rest
	}
}
