// Scenario 23: a lock kept by Do survives its masters restarting without
// persistence one at a time: Extend repairs each, and the restart guard
// keeps each out until it may count again.

package engine

import (
	"context"
	"time"
)

// rollingRestarts holds a lock with Do while each master in turn restarts
// empty, spaced by more than the guard, and a second Client keeps trying
// the key: Do must finish without ErrLockLost, the other Client must never
// get in, and the checker must see no overlap.
func rollingRestarts(s *scenario) {
	s.established()
	guard := chaosTTL
	a := s.client(WithRestartGuard(guard))
	b := s.client(WithRestartGuard(guard))
	stop := make(chan struct{})
	contenderDone := make(chan int)
	go func() { // the contender
		tries := 0
		for {
			select {
			case <-stop:
				contenderDone <- tries
				return
			case <-time.After(chaosTTL / 8):
			}
			tries++
			if l, err := b.TryLock(bg, s.key, chaosTTL); err == nil {
				s.acquired("B", l)
				s.t.Errorf("the contender got the lock during the rolling restarts")
				_ = l.Unlock(bg)
			}
		}
	}()
	// The contender stops while A still holds the lock: a TryLock after
	// Do's release may rightly succeed (under -race one did, between Do's
	// Unlock and the stop).
	tries, stopped := 0, false
	stopContender := func() {
		if !stopped {
			stopped = true
			close(stop)
			tries = <-contenderDone
		}
	}
	err := a.Do(bg, s.key, chaosTTL, func(ctx context.Context) error {
		l := LockFromContext(ctx)
		x := s.acquired("A", l)
		defer func() { // A's window: until fn returns, the lock kept valid
			stopContender()
			x.Extended(l.Until())
			x.Releasing()
		}()
		for i, n := range s.cl.Nodes {
			if err := n.RestartEmpty(); err != nil {
				return err
			}
			s.note("node %d restarted without persistence", i)
			// Past the guard, plus two extensions: the restarted master
			// is repaired and counts again before the next one goes.
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(guard + 2*chaosTTL/3 + chaosNodeD):
			}
		}
		return nil
	})
	stopContender() // when fn never ran
	if err != nil {
		s.t.Fatalf("Do across rolling restarts: %v", err)
	}
	s.t.Logf("5 rolling restarts under Do; the contender tried %d times", tries)
	s.assertSafe()
}
