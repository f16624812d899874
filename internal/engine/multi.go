// Multi-key locks: one Lock that holds several keys, all or none.

package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
)

// TryLockMulti makes one attempt to take every key of keys for ttl, as one
// lock: the *Lock it returns holds all of them, or it returns none. On each
// master one script takes every key or none (a master where another token
// holds one of the keys votes no and sets nothing), and the usual Redlock
// rules apply to the set: a majority, validity = ttl − elapsed − drift, and
// release everywhere on failure. Extend, Unlock, Done and Until work on
// all the keys at once; Unlock announces the release on every key, so
// waiters on any of them try again. Fence draws one fence for all the
// keys: above every earlier holder's of any of them, and below every later
// holder's (see Lock.Fence). DoMulti is Do for a set of keys. A multi-key
// lock is never handed to a waiter by Unlock (see Lock.Unlock): it is
// released, and waiters compete.
//
// keys must be non-empty, each non-empty, and distinct: otherwise the
// error matches ErrInvalidArgument. Where a vote is a Redis Cluster, the
// keys must share a hash slot, since a script may only touch one; give
// them a common hash tag ("{order:7}:stock", "{order:7}:invoice").
// Otherwise TryLockMulti fails as TryLock does.
func (c *Client) TryLockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.acquire(ctx, "try_lock_multi", strings.Join(keys, ","), ttl, func(ctx context.Context, _ string, ttl time.Duration) (*Lock, error) {
		keys, ttl, err := c.checkMulti(ctx, keys, ttl)
		if err != nil {
			return nil, err
		}
		l, err := c.attemptMulti(ctx, keys, ttl, nil)
		if err != nil {
			return nil, withCtx(ctx, err)
		}
		return l, nil
	})
}

// LockMulti takes every key of keys for ttl, as TryLockMulti does, waiting
// until it has them all or ctx ends. After a failed attempt it waits for a
// release of any of the keys (a notice) or a jittered, growing delay,
// whichever comes first. Lock calls on overlapping key sets cannot
// deadlock: no call ever holds some keys while it waits for others.
// Errors are Lock's: ErrNotObtained with the last attempt's *QuorumError
// and ctx's error when ctx ends, ErrClosed after Close, ErrInvalidArgument
// for bad input (see TryLockMulti).
func (c *Client) LockMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	return c.acquire(ctx, "lock_multi", strings.Join(keys, ","), ttl, func(ctx context.Context, _ string, ttl time.Duration) (*Lock, error) {
		keys, ttl, err := c.checkMulti(ctx, keys, ttl)
		if err != nil {
			return nil, err
		}
		return c.waitMulti(ctx, keys, ttl)
	})
}

// checkMulti validates a multi-key call's arguments: it returns a copy of
// keys (the caller may reuse its slice) and ttl rounded as checkLock does.
func (c *Client) checkMulti(ctx context.Context, keys []string, ttl time.Duration) ([]string, time.Duration, error) {
	if len(keys) == 0 {
		return nil, 0, fmt.Errorf("%w: no keys", ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k == "" {
			return nil, 0, fmt.Errorf("%w: empty key in %q", ErrInvalidArgument, keys)
		}
		if err := c.checkKey(k); err != nil {
			return nil, 0, err
		}
		if seen[k] {
			return nil, 0, fmt.Errorf("%w: key %q given twice", ErrInvalidArgument, k)
		}
		seen[k] = true
	}
	if c.anyCluster {
		for _, k := range keys[1:] {
			if a, b := script.HashSlot(keys[0]), script.HashSlot(k); a != b {
				return nil, 0, fmt.Errorf("%w: keys %q and %q are in different hash slots (%d, %d), and on a Redis Cluster vote "+
					"a script may only touch one: give them a common hash tag, such as {%s}:a and {%s}:b",
					ErrInvalidArgument, keys[0], k, a, b, keys[0], keys[0])
			}
		}
	}
	ttl, err := c.checkLock(ctx, keys[0], ttl)
	if err != nil {
		return nil, 0, err
	}
	return append([]string(nil), keys...), ttl, nil
}

// attemptMulti is attempt for a multi-key lock: one acquisition round of
// acquire_multi.lua, released everywhere on failure. answered, when not
// nil, is told of every node's answer (acquireRound.answered).
func (c *Client) attemptMulti(ctx context.Context, keys []string, ttl time.Duration, answered func(node int, a attemptAnswer)) (*Lock, error) {
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.bg.Done()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
	}
	l, err := c.newLock(strings.Join(keys, ","), ttl)
	if err != nil {
		return nil, err
	}
	l.keys = keys
	start := time.Now()
	args := l.args(ttl, script.Notice{}, c.guard(ttl) > 0)
	r := c.fanOutAsync(ctx, "lock", l.key, c.deadline(start, ttl), nil, ttl, &acquireRound{l: l, ttl: ttl, args: args, answered: answered})
	if l.won(r) {
		return l, nil
	}
	l.abandon(ttl)
	return nil, r.error(ErrNotObtained)
}

// waitMulti is LockMulti's retry loop: attempts, and between them the
// backoff delay, cut short by a release notice of any of the keys, or by a
// gap in a key's subscription (it became active, or a node confirmed it
// again: a release may have gone unheard).
//
// Keys already watched (another waiter of the Client, or a subscription
// lingering) are watched from before the first attempt, so that a release
// heard during it counts; the others from their watch, taken after the
// first failed attempt (uncontended calls cost no subscription): a release
// before that subscription is active goes unheard, and its gap stands for
// it.
//
// A release reaches the masters one by one, and a waiter that tries on the
// first one's notice may lose to those it has not reached yet: the notices
// of the masters that refused the attempt, heard after they refused it,
// say the key is free there now (refusalMarks).
func (c *Client) waitMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	var (
		last     error                                // the last attempt decided without ctx ending
		watches  = make([]*wait.Watcher, len(keys))   // nil: not watched (yet)
		events   = make([]<-chan struct{}, len(keys)) // as of the attempt
		releases = make([]int, len(keys))             // of each key, as of its events channel
		gaps     = make([]int, len(keys))             // of each key's subscription, as of the attempt
		marks    = newRefusalMarks(len(keys), len(c.nodes))
	)
	defer func() {
		for _, w := range watches {
			w.Close()
		}
	}()
	for i, k := range keys {
		watches[i] = c.wk.Existing(k)
	}
	joined := strings.Join(keys, ",")
	for fails := 0; ; fails++ {
		for i, w := range watches {
			// Before the attempt: a release during it counts.
			events[i], releases[i] = w.ReleasesSince()
			gaps[i] = w.Gaps()
		}
		l, err := c.attemptMulti(ctx, keys, ttl, marks.next(watches))
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotObtained) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, waitFailed(ctx, joined, last)
		}
		last = err
		if fails == 0 {
			if hook := c.cfg.test.beforeWatch; hook != nil {
				hook()
			}
			var watched []int
			for i, k := range keys {
				if watches[i] == nil {
					watches[i] = c.wk.Watch(k)
					watched = append(watched, i)
				}
			}
			if hook := c.cfg.test.afterWatch; hook != nil {
				hook()
			}
			for _, i := range watched {
				// From the watch: a release heard since counts.
				events[i], releases[i], gaps[i] = watches[i].SinceTaken()
				marks.watched(i, watches[i])
			}
		}
		if err := c.sleepMulti(ctx, joined, last, watches, events, releases, gaps, marks, c.cfg.backoff(fails)); err != nil {
			return nil, err
		}
	}
}

// sleepMulti waits for d, or until one of the keys is released anew: since
// releases[i] releases of key i (a notice; other notices, and the repeats of
// a release heard already, only renew the wait: a multi-key acquisition
// announces nothing, so a repeat would send every loser into another
// attempt on a key just taken), or a master that refused the attempt
// announced a release after its refusal (marks), or its subscription has a gap
// since gaps[i]. It returns LockMulti's error when ctx ends or the Client
// closes first.
func (c *Client) sleepMulti(ctx context.Context, joined string, last error, watches []*wait.Watcher, events []<-chan struct{}, releases, gaps []int, marks *refusalMarks, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	const fixed = 4 // the timer, ctx, Close and the marks, then one case per key
	cases := make([]reflect.SelectCase, fixed, fixed+len(events))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.closing)}
	cases[3] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(marks.changed)}
	for _, ev := range events {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ev)})
	}
	for {
		if h := c.cfg.test.sleepingMulti; h != nil {
			h(events)
		}
		i, _, _ := reflect.Select(cases)
		switch i {
		case 0:
			return nil
		case 1:
			return waitFailed(ctx, joined, last)
		case 2:
			return fmt.Errorf("%w: %q: %w while waiting", ErrNotObtained, joined, ErrClosed)
		case 3: // the attempt's first yes came after notices it may have ignored
			for j := range watches {
				if marks.freed(j) {
					return nil
				}
			}
			continue
		}
		j := i - fixed
		w := watches[j]
		n := releases[j]
		events[j], releases[j] = w.ReleasesSince()
		cases[i].Chan = reflect.ValueOf(events[j])
		if releases[j] != n && w.Latest() == wait.Released {
			return nil
		}
		if marks.freed(j) {
			return nil
		}
		if w.Gaps() != gaps[j] && w.Subscribed() {
			return nil
		}
	}
}

// refusalMarks records, for LockMulti's latest attempt, how many release
// notices of each key each master had announced when it refused the
// attempt, or, for a master that failed or was never asked, when the
// attempt began; -1 for a master that said yes, or has not answered yet.
// When a master said yes (the key was free there), a release notice from a
// marked master, heard after its mark, says the key is free there now,
// though the notice repeats a release the waiter heard already from
// another master: the attempt was ahead of the release. Other repeats are
// no news, and waking on them would send every loser into another attempt
// on a key just taken (a multi-key acquisition announces nothing): one
// heard before the master refused (it released, and another acquisition
// took the key there), one from a master that said yes, and any after an
// attempt no master said yes to (another waiter took every master that had
// released; measured with 8 Clients on two keys, waking on those made a
// third more attempts). Late answers of an earlier attempt are ignored.
type refusalMarks struct {
	mu      sync.Mutex
	attempt int
	yes     bool // a master said yes to the attempt
	// changed is sent to (never blocking) when the first yes comes: a
	// notice heard before it may have been ignored for want of it.
	changed chan struct{}
	watches []*wait.Watcher // as of the attempt, and set by watched
	began   [][]int         // by key, then node: the counts when the attempt began
	at      [][]int         // by key, then node: the marks
}

// An attemptAnswer is how a master answered a LockMulti attempt.
type attemptAnswer int

const (
	answeredYes attemptAnswer = iota
	answeredNo
	noAnswer // an error, or the request was never sent
)

func newRefusalMarks(keys, nodes int) *refusalMarks {
	m := &refusalMarks{watches: make([]*wait.Watcher, keys), began: make([][]int, keys), at: make([][]int, keys), changed: make(chan struct{}, 1)}
	for i := range m.at {
		m.began[i], m.at[i] = make([]int, nodes), make([]int, nodes)
	}
	return m
}

// next starts the marks of a new attempt, made with watches, and returns
// the attempt's acquireRound.answered.
func (m *refusalMarks) next(watches []*wait.Watcher) func(node int, a attemptAnswer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempt++
	attempt := m.attempt
	copy(m.watches, watches)
	for i := range m.at {
		for n := range m.at[i] {
			m.began[i][n], m.at[i][n] = m.watches[i].NodeReleases(n), -1
		}
	}
	m.yes = false
	select {
	case <-m.changed: // an earlier attempt's
	default:
	}
	return func(node int, a attemptAnswer) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.attempt != attempt {
			return
		}
		if a == answeredYes && !m.yes {
			m.yes = true
			select {
			case m.changed <- struct{}{}:
			default:
			}
		}
		for i, w := range m.watches {
			switch a {
			case answeredYes:
				m.at[i][node] = -1
			case answeredNo:
				m.at[i][node] = w.NodeReleases(node) // 0 while unwatched: the watch counts from 0
			case noAnswer:
				m.at[i][node] = m.began[i][node]
			}
		}
	}
}

// watched records key i's watch, taken after the attempt: the marks count
// from it (a release before it went unheard; the subscription's gap
// stands for it).
func (m *refusalMarks) watched(i int, w *wait.Watcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watches[i] = w
	for n := range m.at[i] {
		m.began[i][n] = w.NodeReleases(n)
		if m.at[i][n] >= 0 {
			m.at[i][n] = m.began[i][n]
		}
	}
}

// freed reports whether a master said yes to the attempt, key i is
// released, and a marked master announced a release after its mark.
func (m *refusalMarks) freed(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.yes && m.watches[i].ReleasedSince(m.at[i])
}
