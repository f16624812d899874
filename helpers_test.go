package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
)

// minis is the unit tier's set of masters: in-process miniredis servers.
type minis struct {
	t       *testing.T
	servers []*miniredis.Miniredis
	clients []redis.UniversalClient
}

// newMinis starts n miniredis servers and a go-redis client for each, with
// go-redis's defaults unless opt says otherwise.
func newMinis(t *testing.T, n int, opt *redis.Options) *minis {
	t.Helper()
	m := &minis{t: t}
	for range n {
		s := miniredis.RunT(t)
		o := redis.Options{}
		if opt != nil {
			o = *opt
		}
		o.Addr = s.Addr()
		c := redis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		m.servers = append(m.servers, s)
		m.clients = append(m.clients, c)
	}
	return m
}

// client returns a Client over every server; it is closed when the test ends.
func (m *minis) client(opts ...Option) *Client {
	m.t.Helper()
	c, err := New(m.clients, opts...)
	if err != nil {
		m.t.Fatalf("New: %v", err)
	}
	m.t.Cleanup(func() { _ = c.Close() })
	return c
}

// values returns the value of key on every server, "" where it is absent.
func (m *minis) values(key string) []string {
	vs := make([]string, len(m.servers))
	for i, s := range m.servers {
		if s.Exists(key) {
			vs[i], _ = s.Get(key)
		}
	}
	return vs
}

// A keyspace is a set of masters a test can look into and write to
// directly, bypassing the Client: miniredis servers or real ones.
type keyspace interface {
	values(key string) []string // key's value on every node, "" where absent
	take(i int, key, token string, ttl time.Duration)
}

// count returns on how many nodes key holds value.
func count(ks keyspace, key, value string) int {
	n := 0
	for _, v := range ks.values(key) {
		if v == value {
			n++
		}
	}
	return n
}

func (m *minis) count(key, value string) int { return count(m, key, value) }

// checkAllMasks pre-takes every subset of the five nodes of ks for another
// holder: TryLock must win exactly when at least three are free, leave no key
// of its own behind when it loses, and never touch the other holder's keys.
func checkAllMasks(t *testing.T, c *Client, ks keyspace) {
	t.Helper()
	for mask := range 1 << 5 {
		key := fmt.Sprintf("mask-%02d", mask)
		free := 0
		for i := range 5 {
			if mask&(1<<i) != 0 {
				ks.take(i, key, "other", time.Minute)
			} else {
				free++
			}
		}
		l, err := c.TryLock(context.Background(), key, 10*time.Second)
		settle(c)
		if (err == nil) != (free >= 3) {
			t.Fatalf("mask %05b: %d free, TryLock err = %v", mask, free, err)
		}
		if err != nil {
			if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrNodeRefused) {
				t.Fatalf("mask %05b: error %v should match ErrNotObtained and ErrNodeRefused", mask, err)
			}
		} else if got := count(ks, key, l.Token()); got != free {
			t.Fatalf("mask %05b: lock holds %d nodes, want %d: %q", mask, got, free, ks.values(key))
		} else if err := l.Unlock(context.Background()); err != nil {
			t.Fatalf("mask %05b: Unlock: %v", mask, err)
		}
		settle(c)
		// Our token is nowhere now: free nodes are free again, taken ones
		// still hold the other token.
		if count(ks, key, "") != free || count(ks, key, "other") != 5-free {
			t.Fatalf("mask %05b: afterwards: %q", mask, ks.values(key))
		}
	}
}

// take sets key to token on server i, as another client's lock would.
func (m *minis) take(i int, key, token string, ttl time.Duration) {
	s := m.servers[i]
	if err := s.Set(key, token); err != nil {
		m.t.Fatal(err)
	}
	s.SetTTL(key, ttl)
}

// block makes server i hold every command until the returned function is
// called (or the test ends), like a hung node. It returns a channel that
// receives once for each command held, so tests can wait on the fact that a
// request reached the node instead of sleeping.
func (m *minis) block(i int) (arrived <-chan string, unblock func()) {
	gate := make(chan struct{})
	got := make(chan string, 100)
	m.servers[i].Server().SetPreHook(func(_ *server.Peer, cmd string, _ ...string) bool {
		select {
		case got <- cmd:
		default:
		}
		<-gate
		return false
	})
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			m.servers[i].Server().SetPreHook(nil)
			close(gate)
		})
	}
	m.t.Cleanup(unblock)
	return got, unblock
}

// fastForward moves every server's clock, expiring keys.
func (m *minis) fastForward(d time.Duration) {
	for _, s := range m.servers {
		s.FastForward(d)
	}
}

// settle waits until no goroutine of c is talking to a node: late replies
// have arrived and their clean-up is done. Tests call it only when they
// start no operation concurrently.
func settle(c *Client) { c.bg.Wait() }

// mustLock takes key or fails the test, then settles c so that every node
// the lock will ever hold already holds it.
func mustLock(t *testing.T, c *Client, key string, ttl time.Duration) *Lock {
	t.Helper()
	l, err := c.TryLock(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	settle(c)
	return l
}

// within runs f and fails the test if it has not returned after limit,
// instead of letting a wrong implementation hang the suite.
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
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

type lockResult struct {
	l   *Lock
	err error
}

func tryLock(ctx context.Context, c *Client, key string, ttl time.Duration) func() lockResult {
	return func() lockResult {
		l, err := c.TryLock(ctx, key, ttl)
		return lockResult{l, err}
	}
}

// commandCalls is how many calls of the named commands (lower case, as
// INFO commandstats spells them) the server has run.
func commandCalls(tb testing.TB, admin *redis.Client, names ...string) int64 {
	tb.Helper()
	info, err := admin.Info(bg, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, name := range names {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":"); ok {
				var calls int64
				if _, err := fmt.Sscanf(rest, "calls=%d", &calls); err == nil {
					n += calls
				}
			}
		}
	}
	return n
}
