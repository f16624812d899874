// Package drivertest is the acceptance suite of a driver.Conn adapter: run
// it from the adapter's tests, and it starts real redis-server processes
// and checks, through the adapter alone, everything the library relies on:
// reply types and nil replies, server errors as the server wrote them,
// scripts and NOSCRIPT, pipelines, concurrent use, pub/sub (confirmations,
// delivery, unsubscribing, a connection killed under a subscription),
// ctx's end on a hung server, and a redlock Client over three masters
// taking, extending and releasing locks, with two Clients excluding each
// other.
//
//	func TestAcceptance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
//			c := mydriver.Dial(addr)
//			t.Cleanup(func() { c.Close() })
//			return myadapter.New(c)
//		})
//	}
//
// It needs redis-server on PATH (or REDIS_SERVER naming it) and fails
// without it; under go test -short it skips. It takes about two seconds.
package drivertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/redistest"
)

// A Dial returns a Conn to the plain redis-server at addr (host:port),
// with the driver's default options: its Conn is closed when t ends (the
// Dial registers that with t.Cleanup).
type Dial func(t *testing.T, addr string) driver.Conn

// masters is how many servers Run starts: the end-to-end tests' Client
// votes over all of them.
const masters = 3

// Run runs the suite against the adapter that dial makes, as subtests of
// t, on masters redis-server processes it starts and stops.
func Run(t *testing.T, dial Dial) {
	redistest.SkipShort(t)
	servers := redistest.StartN(t, masters)
	s := &suite{dial: dial, servers: servers}
	t.Run("Replies", s.replies)
	t.Run("Errors", s.errorReplies)
	t.Run("Scripts", s.scripts)
	t.Run("Pipeline", s.pipeline)
	t.Run("PipelineOneConnection", s.pipelineOneConnection)
	t.Run("Concurrent", s.concurrent)
	t.Run("Topology", s.topology)
	t.Run("Cancel", s.cancel)
	t.Run("HungServer", s.hung)
	t.Run("PubSub", s.pubsub)
	t.Run("PubSubReconnects", s.reconnects)
	t.Run("Lock", s.lock)
	t.Run("LockScriptCacheFlushed", s.scriptCacheFlushed)
	t.Run("LockExclusion", s.exclusion)
}

// suite holds the servers every subtest shares; each uses keys of its own.
type suite struct {
	dial    Dial
	servers []*redistest.Server
}

// conn dials the first server.
func (s *suite) conn(t *testing.T) driver.Conn {
	t.Helper()
	c := s.dial(t, s.servers[0].Addr)
	if c == nil {
		t.Fatal("dial returned a nil Conn")
	}
	return c
}

// conns dials every server.
func (s *suite) conns(t *testing.T) []driver.Conn {
	t.Helper()
	cs := make([]driver.Conn, len(s.servers))
	for i, srv := range s.servers {
		cs[i] = s.dial(t, srv.Addr)
	}
	return cs
}

// ctx returns a context ending within the suite's bound for one command,
// cancelled when t ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), redistest.Scaled(5*time.Second))
	t.Cleanup(cancel)
	return c
}

// do runs args on c and fails t on an error.
func do(t *testing.T, c driver.Conn, args ...any) any {
	t.Helper()
	r := c.Do(ctx(t), args...)
	if r.Err != nil {
		t.Fatalf("%v: %v", args, r.Err)
	}
	return r.Val
}

// within runs f and fails t when it has not returned after d: a wrong
// adapter must not hang the suite.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	redistest.Within(t, d, what, func() struct{} { f(); return struct{}{} })
}

// inParallel runs work(0) to work(workers-1) at once, each in a goroutine
// of its own, waits for all of them (what, within 20 s scaled), and fails
// t, and ends it, with every error they returned.
func inParallel(t *testing.T, what string, workers int, work func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(w); err != nil {
				errs <- err
			}
		}()
	}
	within(t, redistest.Scaled(20*time.Second), what, wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}
