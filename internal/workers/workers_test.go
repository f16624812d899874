package workers

import (
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// Every task handed to Run runs, in bursts that find idle workers and
// bursts that start new ones, and Close ends every worker.
func TestEveryTaskRunsAndCloseEndsTheWorkers(t *testing.T) {
	before := goleak.IgnoreCurrent()
	p := New()
	var wg sync.WaitGroup
	ran := make(chan int, 100)
	for i := range 100 {
		wg.Add(1)
		p.Run(Func(func() {
			defer wg.Done()
			ran <- i
		}))
		if i%10 == 9 {
			wg.Wait() // a quiet moment: the next tasks go to idle workers
		}
	}
	wg.Wait()
	close(ran)
	seen := map[int]bool{}
	for i := range ran {
		seen[i] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d of 100 tasks ran", len(seen))
	}
	p.Close()
	goleak.VerifyNone(t, before)
}
