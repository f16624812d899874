// Helpers every test tier shares: the unit tier's in-process masters (minis),
// real redis-server masters (realNodes), waiting on Lock calls in the
// background, counting commands, and the time scale for liveness bounds.

package engine

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/internal/mini"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// minis is the unit tier's set of masters: in-process miniredis servers (internal/mini),
// whose clocks stand still but for fastForward (TTLs read back exactly).
type minis struct {
	t       *testing.T
	servers []*mini.Server
	clients []redis.UniversalClient
	made    []*Client // by client, for fastForward
}

// newMinis starts n miniredis servers and a go-redis client for each, with
// go-redis's defaults unless opt says otherwise.
func newMinis(t *testing.T, n int, opt *redis.Options) *minis {
	t.Helper()
	m := &minis{t: t}
	for range n {
		s := mini.RunT(t)
		s.FreezeClock()
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
	ageMemory(t, m.clients, establishedAge)
	return m
}

// establishedAge is how old the masters' memories are when a test starts:
// a deployment that has run for a while, where a master that loses its data
// is younger than the others (see guard.go). Tests of a fresh deployment
// flush the markers.
const establishedAge = time.Hour

// ageMemory makes each master's memory marker say that its memory began d
// ago by its own clock, with no TTL recorded yet.
func ageMemory(t testing.TB, nodes []redis.UniversalClient, d time.Duration) {
	t.Helper()
	for _, n := range nodes {
		now, err := n.Time(context.Background()).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		born := now.Add(-d).UnixMilli()
		if err := n.Set(context.Background(), script.MarkerKey("", false), fmt.Sprintf("%d 0", born), 0).Err(); err != nil {
			t.Fatalf("setting the memory marker: %v", err)
		}
	}
}

// client returns a Client over every server; it is closed when the test ends.
func (m *minis) client(opts ...Option) *Client {
	m.t.Helper()
	c, err := New(m.clients, opts...)
	if err != nil {
		m.t.Fatalf("New: %v", err)
	}
	m.t.Cleanup(func() { _ = c.Close() })
	m.made = append(m.made, c)
	return c
}

// values returns the value of key on every server, "" where it is absent.
func (m *minis) values(key string) []string {
	vs := make([]string, len(m.servers))
	for i, s := range m.servers {
		if s.Exists(key) {
			v, _ := s.Get(key)
			vs[i] = v
		}
	}
	return vs
}

// fingerprintOf is lua/token.lua's fingerprint of a lock key's value v:
// what its wanted key holds once another Client's waiter was refused by v.
func fingerprintOf(v string) string {
	h := sha1.Sum([]byte(v[:min(len(v), 64)] + " " + strconv.Itoa(len(v))))
	return hex.EncodeToString(h[:])[:8]
}

// isMarked reports whether a master's wanted key w names its lock key's
// value v (lua/token.lua's wanted): both as GET returned them, "" absent.
func isMarked(v, w string) bool { return v != "" && w == fingerprintOf(v) }

// A keyspace is a set of masters a test can look into and write to
// directly, bypassing the Client: miniredis servers or real ones.
type keyspace interface {
	values(key string) []string // the token key holds on every node, "" where absent
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
	m.servers[i].SetPreHook(func(cmd string, _ []string) error {
		select {
		case got <- cmd:
		default:
		}
		<-gate
		return nil
	})
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			m.servers[i].SetPreHook(nil)
			close(gate)
		})
	}
	m.t.Cleanup(unblock)
	return got, unblock
}

// fastForward moves every server's clock, expiring keys, and the clock the
// Clients count the masters' memories on (guard.go) with them: the
// memories they know of by then, so settle a Client first whose late
// replies should count.
func (m *minis) fastForward(d time.Duration) {
	for _, s := range m.servers {
		s.FastForward(d)
	}
	for _, c := range m.made {
		for _, n := range c.nodes {
			if k := n.known.Load(); k != nil {
				n.known.Store(newKnownMemory(k.born, k.since.Add(-d)))
			}
		}
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

// within runs f and fails the test if it has not returned after limit
// (redistest.Within).
func within[T any](t *testing.T, limit time.Duration, what string, f func() T) T {
	t.Helper()
	return redistest.Within(t, limit, what, f)
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
	calls, err := redistest.CommandCalls(bg, admin)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, name := range names {
		n += calls[name]
	}
	return n
}

type realNodes struct {
	t       *testing.T
	servers []*redistest.Server
	clients []redis.UniversalClient // what the Client uses
	admin   []*redis.Client         // for the test to look at and set keys
}

func startReal(t *testing.T, n int) *realNodes {
	t.Helper()
	r := &realNodes{t: t, servers: redistest.StartN(t, n)}
	for _, s := range r.servers {
		r.clients = append(r.clients, s.Client(nil))
		r.admin = append(r.admin, s.Client(&redis.Options{MaxRetries: -1}))
	}
	ageMemory(t, r.clients, establishedAge)
	return r
}

func (r *realNodes) client(opts ...Option) *Client {
	r.t.Helper()
	c, err := New(r.clients, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		// Resume paused nodes first, so that Close need not wait out the
		// driver's timeouts for requests they hold.
		for _, s := range r.servers {
			s.Resume()
		}
		_ = c.Close()
	})
	return c
}

// values returns key's value on every node, "" where absent.
func (r *realNodes) values(key string) []string {
	r.t.Helper()
	vs := make([]string, len(r.admin))
	for i, a := range r.admin {
		v, err := a.Get(bg, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			r.t.Fatalf("GET on node %d: %v", i, err)
		}
		vs[i] = v
	}
	return vs
}

func (r *realNodes) count(key, value string) int { return count(r, key, value) }

func (r *realNodes) take(i int, key, token string, ttl time.Duration) {
	r.t.Helper()
	if err := r.admin[i].Set(bg, key, token, ttl).Err(); err != nil {
		r.t.Fatal(err)
	}
}

// queued waits until n goroutines wait in c's FIFO for key.
func queued(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	within(t, scaled(5*time.Second), "queueing", func() bool {
		for {
			if c.turns.Waiting(key) >= n {
				return true
			}
			time.Sleep(time.Millisecond) // the queue has no signal for tests
		}
	})
}

// numsub is how many subscribers key.s notice channel has on node i.
func (r *realNodes) numsub(i int, key string) int64 {
	r.t.Helper()
	n, err := r.admin[i].PubSubNumSub(bg, script.NoticeChannel(key)).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return n[script.NoticeChannel(key)]
}

// subscribed waits until every node has a subscriber for key's releases.
func (r *realNodes) subscribed(key string) {
	r.t.Helper()
	within(r.t, scaled(5*time.Second), "subscribing", func() bool {
		for {
			all := true
			for i := range r.admin {
				all = all && r.numsub(i, key) > 0
			}
			if all {
				return true
			}
			time.Sleep(time.Millisecond) // the server offers no signal
		}
	})
}

// lockInBackground calls c.Lock(ctx, key, time.Minute) in a goroutine and
// reports its error.
func lockInBackground(ctx context.Context, c *Client, key string) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, key, time.Minute)
		res <- err
	}()
	return res
}

// awaitLock fails the test unless the waiter's Lock, reporting on res,
// succeeds within a generous bound.
func awaitLock(t *testing.T, res <-chan error, hung string) {
	t.Helper()
	awaitLockWithin(t, res, scaled(2*time.Second), hung)
}

// awaitLockWithin is awaitLock with the bound given.
func awaitLockWithin(t *testing.T, res <-chan error, bound time.Duration, hung string) {
	t.Helper()
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatal(hung)
	}
}

// countCommands counts the commands go-redis sends on clients (pub/sub
// calls go through their own connection and are not seen here).
func countCommands(clients []redis.UniversalClient) func() int {
	rec := &commandRecorder{}
	for _, c := range clients {
		c.AddHook(rec)
	}
	return func() int { return len(rec.commands()) }
}

// contend runs workers goroutines that each take the lock rounds times and
// checks mutual exclusion.
func contend(t *testing.T, nodes []redis.UniversalClient, workers, rounds int) {
	t.Helper()
	c, err := New(nodes, WithRetryDelay(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var inside, maxInside atomic.Int32
	counter := 0 // guarded by the lock alone: -race reports any overlap too
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(bg, scaled(30*time.Second))
				l, err := c.Lock(ctx, "contended", 10*time.Second)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n > maxInside.Load() {
					maxInside.Store(n)
				}
				v := counter
				time.Sleep(100 * time.Microsecond) // widen the read-modify-write window
				counter = v + 1
				inside.Add(-1)
				if err := l.Unlock(bg); err != nil {
					errs <- fmt.Errorf("Unlock: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}
	if counter != workers*rounds {
		t.Fatalf("counter = %d, want %d: critical sections overlapped", counter, workers*rounds)
	}
}

// timeScale stretches every liveness bound and test timing in the suite
// (redistest.TimeScale: one factor for every package's tests).
var timeScale = redistest.TimeScale

// scaled returns d stretched by timeScale.
func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * timeScale) }

// A batchHold is a go-redis hook that holds the next n batches (a pipeline,
// or a lone command) that carry a call of its script (any command when the
// script is nil) before they reach the connection, until open: one hung
// connection of a master that is otherwise well. holding receives once per
// batch held.
type batchHold struct {
	filter  *scriptHook // nil: every batch
	n       atomic.Int32
	holding chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBatchHold(script *script.Script, n int) *batchHold {
	h := &batchHold{holding: make(chan struct{}, 64), release: make(chan struct{})}
	if script != nil {
		h.filter = &scriptHook{script: script}
	}
	h.arm(n)
	return h
}

// arm makes the hook hold the next n batches it matches.
func (h *batchHold) arm(n int) { h.n.Store(int32(n)) }

// open lets every held batch, and every later one, through.
func (h *batchHold) open() { h.once.Do(func() { close(h.release) }) }

func (h *batchHold) hold(cmds []redis.Cmder) {
	for _, c := range cmds {
		if h.filter != nil && !h.filter.matches(c) {
			continue
		}
		if h.n.Add(-1) >= 0 {
			h.holding <- struct{}{}
			<-h.release
		}
		return
	}
}

func (h *batchHold) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *batchHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.hold([]redis.Cmder{cmd}); return next(ctx, cmd) }
}
func (h *batchHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.hold(cmds); return next(ctx, cmds) }
}

// New is NewFromDrivers over go-redis clients, as redlock.New.
func New(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	return NewFromDrivers(goredis.Wrap(clients), opts...)
}

// goRedisOf returns the go-redis client behind n.
func goRedisOf(n *node) redis.UniversalClient { return n.conn.D.(goredis.Conn).Client() }

// goRedisClients returns c's masters' go-redis clients, for hooks added
// after New.
func goRedisClients(c *Client) []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = goRedisOf(n)
	}
	return clients
}

// awaitHeld waits for n requests of heldAttempts' Client to be held at its
// hook, and fails the test if they are not within seconds: a request the
// round decided before it was sent never comes.
func awaitHeld(t *testing.T, reached <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		within(t, scaled(5*time.Second), fmt.Sprintf("held request %d of %d", i+1, n), func() bool { <-reached; return true })
	}
}
