// Multi-key locks: one Lock that holds several keys, all or none.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
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
	return c.acquire(ctx, "TryLockMulti", strings.Join(keys, ","), ttl, func(ctx context.Context, _ string, ttl time.Duration) (*Lock, error) {
		keys, ttl, err := c.checkMulti(ctx, keys, ttl)
		if err != nil {
			return nil, err
		}
		l, err := c.attemptMulti(ctx, keys, ttl)
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
	return c.acquire(ctx, "LockMulti", strings.Join(keys, ","), ttl, func(ctx context.Context, _ string, ttl time.Duration) (*Lock, error) {
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
			if a, b := hashSlot(keys[0]), hashSlot(k); a != b {
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
// acquire_multi.lua, released everywhere on failure.
func (c *Client) attemptMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
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
	args := l.args(ttl, notice{}, c.guard(ttl) > 0)
	r := c.fanOutAsync(ctx, "lock", l.key, c.deadline(start, ttl), nil, ttl, &acquireRound{l: l, ttl: ttl, args: args})
	if l.won(r) {
		return l, nil
	}
	l.abandon(ttl)
	return nil, r.error(ErrNotObtained)
}

// waitMulti is LockMulti's retry loop: attempts, and between them the
// backoff delay, cut short by a release notice of any of the keys.
func (c *Client) waitMulti(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	var (
		watches  []*watcher // from the first failed attempt on
		last     error      // the last attempt decided without ctx ending
		events   []<-chan struct{}
		releases []int // of each key, as of its events channel
	)
	defer func() {
		for _, w := range watches {
			w.close()
		}
	}()
	joined := strings.Join(keys, ",")
	for fails := 0; ; fails++ {
		for i, w := range watches {
			events[i] = w.events() // before the attempt: one during it counts
		}
		l, err := c.attemptMulti(ctx, keys, ttl)
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
		if watches == nil {
			for _, k := range keys {
				watches = append(watches, c.wk.watch(k))
			}
			events = make([]<-chan struct{}, len(watches))
			releases = make([]int, len(watches))
			for i, w := range watches {
				events[i], releases[i] = w.releasesSince()
			}
		}
		if err := c.sleepMulti(ctx, joined, last, watches, events, releases, c.cfg.backoff(fails)); err != nil {
			return nil, err
		}
	}
}

// sleepMulti waits for d, or until one of the keys is released anew: since
// releases[i] releases of key i (a notice; other notices, and the repeats of
// a release heard already, only renew the wait: a multi-key acquisition
// announces nothing, so a repeat would send every loser into another
// attempt on a key just taken). It returns LockMulti's error when ctx ends
// or the Client closes first.
func (c *Client) sleepMulti(ctx context.Context, joined string, last error, watches []*watcher, events []<-chan struct{}, releases []int, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	const fixed = 3 // the timer, ctx and Close, then one case per key
	cases := make([]reflect.SelectCase, fixed, fixed+len(events))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.closing)}
	for _, ev := range events {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ev)})
	}
	for {
		i, _, _ := reflect.Select(cases)
		switch i {
		case 0:
			return nil
		case 1:
			return waitFailed(ctx, joined, last)
		case 2:
			return fmt.Errorf("%w: %q: %w while waiting", ErrNotObtained, joined, ErrClosed)
		}
		j := i - fixed
		w := watches[j]
		n := releases[j]
		events[j], releases[j] = w.releasesSince()
		cases[i].Chan = reflect.ValueOf(events[j])
		if releases[j] != n && w.latest() == released {
			return nil
		}
	}
}

// hashedPart is the part of key that Redis Cluster hashes: its hash tag's
// content, or the whole key without one.
func hashedPart(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// hashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key without one, modulo 16384.
func hashSlot(key string) int {
	key = hashedPart(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
