package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/script"
)

// The quick acquisition (quick.go's quickCmds, Q1 and Q2 there) on real
// masters. Its commands go only in a batch shared with other requests, so
// each test makes one: quickBatch holds the first attempt's requests on
// their way to every master, queues the others' behind them, and lets all
// go.

// quickBatch runs TryLock on each of keys with c, the first alone, for a
// second, and the rest, for ttl, queued behind it on every master, so that
// they go out together as one batch per master; it returns the locks, nil
// where not obtained.
func quickBatch(t *testing.T, r *realNodes, c *Client, ttl time.Duration, keys ...string) []*Lock {
	t.Helper()
	h := newBatchHold(script.Acquire, len(r.clients))
	hookAll(r.clients, h)
	t.Cleanup(h.open)
	locks := make([]*Lock, len(keys))
	var wg sync.WaitGroup
	try := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := ttl
			if i == 0 {
				d = time.Second
			}
			l, err := c.TryLock(bg, keys[i], d)
			if err == nil {
				locks[i] = l
			}
		}()
	}
	try(0)
	for range r.clients {
		within(t, scaled(5*time.Second), "the first attempt's requests held", func() bool { <-h.holding; return true })
	}
	for i := 1; i < len(keys); i++ {
		try(i)
	}
	for _, n := range c.nodes {
		within(t, scaled(5*time.Second), "the other attempts queued", func() bool {
			for n.pipe.Queued() < len(keys)-1 {
				time.Sleep(time.Millisecond)
			}
			return true
		})
	}
	h.open()
	wg.Wait()
	return locks
}

// learnMemories makes c learn every master's memory, as a Client that has
// locked before knows it: a lock of ttl, and its release.
func learnMemories(t *testing.T, c *Client, ttl time.Duration) {
	t.Helper()
	l, err := c.TryLock(bg, "warm", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// TestQuickAcquisitionsInABatchHoldTheirKeys: attempts that share a batch
// go as SET NX PX (and GET of the marker with the restart guard on), and
// each holds its key on every master, with the guard on and off; one on a
// key another token holds is refused (Q1), and writes nothing to the key.
func TestQuickAcquisitionsInABatchHoldTheirKeys(t *testing.T) {
	for _, guard := range []bool{true, false} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) {
			r := startReal(t, 5)
			var opts []Option
			if !guard {
				opts = append(opts, WithRestartGuard(0))
			}
			c := r.client(opts...)
			learnMemories(t, c, time.Minute)
			sets := make([]int64, len(r.admin))
			for i := range r.admin {
				sets[i] = commandCalls(t, r.admin[i], "set")
			}
			for i := range r.admin {
				r.take(i, "held", "another", time.Minute)
			}
			order := &quickOrder{}
			hookAll(r.clients, order)
			keys := []string{"q0", "q1", "held", "q3"}
			locks := quickBatch(t, r, c, time.Minute, keys...)
			settle(c) // every master's answer in, the scripts asked after quick replies too
			order.check(t, guard)
			for i, l := range locks {
				if keys[i] == "held" {
					if l != nil {
						t.Fatalf("TryLock(held) obtained a key another token holds on every master")
					}
					if n := r.count("held", "another"); n != len(r.admin) {
						t.Errorf("the other token holds its key on %d masters, want %d", n, len(r.admin))
					}
					continue
				}
				if l == nil {
					t.Fatalf("TryLock(%s) failed", keys[i])
				}
				if n := r.count(keys[i], l.Token()); n != len(r.admin) {
					t.Errorf("%s holds its token on %d masters, want %d", keys[i], n, len(r.admin))
				}
			}
			for i := range r.admin {
				if got := commandCalls(t, r.admin[i], "set") - sets[i]; got < int64(len(keys)-1) {
					t.Errorf("master %d ran %d SETs, want the %d batched attempts' quick SETs at least", i, got, len(keys)-1)
				}
			}
		})
	}
}

// quickOrder records, for each pipeline that carries quick SETs, where
// they and the marker's GETs are in it.
type quickOrder struct {
	mu    sync.Mutex
	pipes [][]string // "set" or "get", in order
}

func (o *quickOrder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (o *quickOrder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (o *quickOrder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var seq []string
		for _, c := range cmds {
			args := c.Args()
			switch {
			case isQuickSet(args):
				seq = append(seq, "set")
			case len(args) == 2 && strings.EqualFold(fmt.Sprint(args[0]), "get") && args[1] == script.MarkerKey("", false):
				seq = append(seq, "get")
			}
		}
		if len(seq) > 0 {
			o.mu.Lock()
			o.pipes = append(o.pipes, seq)
			o.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// check: some pipeline carried quick SETs; each that did has, with the
// restart guard on, exactly one marker GET, after all of them (it vouches
// for each SET before it on the connection); none without the guard.
func (o *quickOrder) check(t *testing.T, guard bool) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pipes) == 0 {
		t.Fatal("no pipeline carried a quick SET")
	}
	for _, seq := range o.pipes {
		gets := strings.Count(strings.Join(seq, " "), "get")
		switch {
		case !guard && gets != 0:
			t.Errorf("without the guard, a pipeline read the marker: %v", seq)
		case guard && (gets != 1 || seq[len(seq)-1] != "get"):
			t.Errorf("pipeline %v: want one marker GET, after every quick SET", seq)
		}
	}
}

// TestAQuickAcquisitionInAnotherMemoryIsAskedAgain: a master whose marker
// names another memory than the one the Client knows (it lost its data and
// a script made a new marker) answers a batched quick acquisition's SET
// with OK: Q2 fails, so the acquire script answers, and the Client learns
// the new memory from it (the quick reply alone would have counted the
// vote as one from the old memory, past the restart guard).
func TestAQuickAcquisitionInAnotherMemoryIsAskedAgain(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	learnMemories(t, c, time.Minute)
	old := c.nodes[0].known.Load()
	if old == nil {
		t.Fatal("the Client learned no memory of master 0")
	}
	now, err := r.admin[0].Time(bg).Result()
	if err != nil {
		t.Fatal(err)
	}
	born := now.UnixMilli()
	if err := r.admin[0].Set(bg, script.MarkerKey("", false), fmt.Sprintf("%d %d", born, time.Minute.Milliseconds()), 0).Err(); err != nil {
		t.Fatal(err)
	}
	locks := quickBatch(t, r, c, time.Minute, "q0", "q1", "q2")
	for i, l := range locks {
		if l == nil {
			t.Fatalf("TryLock %d failed: four masters remember further back", i)
		}
	}
	settle(c)                     // master 0's answers in
	for i, l := range locks[1:] { // the batched ones
		if got := l.holds[0].born.Load(); got != born {
			t.Errorf("batched lock %d: master 0's memory %d, want %d (the new marker's): a quick reply counted it as the memory the Client knew", i+1, got, born)
		}
	}
}

// TestAQuickAcquisitionLongerThanTheMarkersTTLIsAskedAgain: a master whose
// marker records a longest TTL shorter than the attempt's answers its SET
// with OK: Q2 fails, so the acquire script answers, and it lengthens the
// marker's longest TTL, which the restart guard of a later restart reads.
func TestAQuickAcquisitionLongerThanTheMarkersTTLIsAskedAgain(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	learnMemories(t, c, time.Second)
	ttl := time.Minute
	quickBatch(t, r, c, ttl, "q0", "q1", "q2")
	for i, a := range r.admin {
		v, err := a.Get(bg, script.MarkerKey("", false)).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, longest, ok := parseMarker(v)
		if !ok || longest < ttl.Milliseconds() {
			t.Errorf("master %d's marker %q: want a longest TTL of %d ms at least", i, v, ttl.Milliseconds())
		}
	}
}

// TestParseMarkerReadsWhatMemoryLuaReads: the quick acquisition reads a
// marker as lua/memory.lua does ('^(%d+) (%d+)$'): anything else is not a
// memory, and the script answers.
func TestParseMarkerReadsWhatMemoryLuaReads(t *testing.T) {
	for v, want := range map[string]bool{
		"1700000000000 30000": true, "0 0": true,
		"+1700000000000 30000": false, "1700000000000 +30000": false, "-1 5": false,
		"1700000000000": false, " 5": false, "5 ": false, "1 2 3": false, "": false, "0x10 5": false,
	} {
		if _, _, ok := parseMarker(v); ok != want {
			t.Errorf("parseMarker(%q) ok = %v, want %v", v, ok, want)
		}
	}
}

// TestAQuickAcquisitionOnAMasterAtMaxmemoryCountsNoVote: a master at
// maxmemory (noeviction) answers a batched quick SET with OOM: that call
// fails, no vote and no key there, and the attempts hold on the four
// others.
func TestAQuickAcquisitionOnAMasterAtMaxmemoryCountsNoVote(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	learnMemories(t, c, time.Minute)
	if err := r.admin[0].ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.admin[0].ConfigSet(bg, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	keys := []string{"q0", "q1", "q2", "q3"}
	locks := quickBatch(t, r, c, time.Minute, keys...)
	settle(c)
	for i, l := range locks {
		if l == nil {
			t.Fatalf("TryLock(%s) failed: four masters have room", keys[i])
		}
		vs := r.values(keys[i])
		if vs[0] != "" {
			t.Errorf("%s: master 0, at maxmemory, holds %q", keys[i], vs[0])
		}
		if n := r.count(keys[i], l.Token()); n != len(r.admin)-1 {
			t.Errorf("%s holds its token on %d masters, want the %d with room", keys[i], n, len(r.admin)-1)
		}
	}
}
