package leakcheck

import (
	"strings"
	"testing"
)

func TestCheckFindsAGoroutineThatNeverEnds(t *testing.T) {
	before := Current()
	stop := make(chan struct{})
	started := make(chan struct{})
	go blockedForever(started, stop)
	<-started
	leaks := find(before, nil)
	close(stop)
	if len(leaks) != 1 || !strings.Contains(leaks[0].stack, "blockedForever") {
		t.Fatalf("found %d leaks, want the one in blockedForever: %+v", len(leaks), leaks)
	}
	if err := Check(before); err != nil {
		t.Fatalf("after it returned: %v", err)
	}
}

func TestCheckIgnoresNamedFunctions(t *testing.T) {
	before := Current()
	stop := make(chan struct{})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		blockedForever(started, stop)
	}()
	defer func() { close(stop); <-done }() // gone before the next test looks
	<-started
	ignore := []string{
		"github.com/redlock-go/redlock/internal/leakcheck.blockedForever",
		"github.com/redlock-go/redlock/internal/leakcheck.TestCheckIgnoresNamedFunctions.func1",
	}
	if leaks := find(before, ignore); len(leaks) != 0 {
		t.Fatalf("an ignored function counted: %+v", leaks)
	}
}

func TestCheckIgnoresTheTestFramework(t *testing.T) {
	// This test's own goroutine and the framework's are running.
	if leaks := find(nil, nil); len(leaks) != 0 {
		t.Fatalf("the test framework's goroutines counted as leaks: %+v", leaks)
	}
}

func blockedForever(started, stop chan struct{}) {
	close(started)
	<-stop
}
