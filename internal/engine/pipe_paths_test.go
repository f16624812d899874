// Adversarial tests (written by a review that tried to break them) of the pipelining (pipe.go), the round context
// (quorum.go) and the restart guard's fast path (guard.go), against real
// redis-server masters.

package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// Found by an adversarial review (failed every run before the fix in
// take): when the pipe timer (stall) started another sender beside a
// stalled batch, it zeroed the pipe's due time and re-armed it only when it
// could NOT start a sender. The new sender takes at most `limit`
// requests; the rest of the queue is left without any timer. If the new
// batch stalls too, they wait behind it past their deadline, although up to
// maxStalledBatches (4) batches may be out: a request then waits far more
// than half of its remaining time, contrary to pipe.go's contract.
//
// Here: limit 2, node deadline D. One batch to master 0 hangs; 5 requests
// queue (each needs master 0: masters 3 and 4 are taken). At D/2 the stall
// sends 2 of them beside it, and that batch hangs too. The other 3 must go
// out in a third batch at the latest D/2 + D/4 and win; they time out on
// master 0 instead.
func TestPipeRequestsBeyondABatchBehindAStallStillGoOut(t *testing.T) {
	for _, hung := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit=2/hung=%d", hung), func(t *testing.T) { advStallOverflow(t, hung, 2, 5) })
	}
	// The default limit: 133 requests queue, 128 go beside the first hung
	// batch and hang too; the other 5 are left without a timer.
	t.Run("limit=default/hung=2", func(t *testing.T) { advStallOverflow(t, 2, master.DefaultBatchLimit, master.DefaultBatchLimit+5) })
}

// advStallOverflow: hung is how many acquire batches to master 0 hang (1:
// the control case, where the second batch goes through).
func advStallOverflow(t *testing.T, hung, limit, n int) {
	r := startReal(t, 5)
	d := scaled(400 * time.Millisecond)
	c := r.client(WithBatchLimit(limit), WithNodeTimeout(d))
	mustLock(t, c, "warm", time.Minute) // connections open, scripts loaded
	rec := &batchRecorder{}             // outside the hold: it sees the hung batches too
	r.clients[0].AddHook(rec)
	h := newBatchHold(script.Acquire, hung) // the first acquire batches to master 0 hang
	r.clients[0].AddHook(h)
	t.Cleanup(h.open)

	go func() { _, _ = c.TryLock(bg, "hung", time.Minute) }()
	<-h.holding
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	for _, k := range keys {
		for _, i := range []int{3, 4} {
			r.take(i, k, "other", time.Minute)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.TryLock(bg, k, time.Minute)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
		}
		if i < 5 {
			t.Logf("%s: %v", keys[i], err)
		}
	}
	rec.mu.Lock()
	t.Logf("batches sent to master 0 before the hang is lifted (script calls each): %v", rec.sizes)
	rec.mu.Unlock()
	h.open()
	settle(c)
	// limit of them were in the second hung batch: they may fail. The
	// others had a healthy connection's worth of room beside it.
	if hung == 1 {
		limit = 0
	}
	if want := n - limit; won < want {
		t.Fatalf("%d of %d won; want the %d not in a hung batch to go out beside the stalled ones and win", won, n, want)
	}
}

var _ = errors.Is

// advDelay delays every command and pipeline to a master by a random few
// milliseconds, and one in `every` by long (past the node deadline): batches
// form, and some stall.
type advDelay struct {
	mu    sync.Mutex
	n     int
	every int
	long  time.Duration
}

func (d *advDelay) pause() {
	d.mu.Lock()
	d.n++
	n := d.n
	d.mu.Unlock()
	if d.every > 0 && n%d.every == 0 {
		time.Sleep(d.long)
		return
	}
	time.Sleep(time.Duration(n%4) * time.Millisecond)
}
func (d *advDelay) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *advDelay) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { d.pause(); return next(ctx, cmd) }
}
func (d *advDelay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { d.pause(); return next(ctx, cmds) }
}

// expected reports whether err is one of the outcomes an operation may end
// with under delays and cancellations: anything else (a script reply of the
// wrong shape, a nil reply) means a reply went astray.
func advExpected(err error) bool {
	return err == nil || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Many goroutines of one Client, with contention (several per key), mixing
// TryLock (some with a caller ctx ending mid-flight), Extend, Fence, Do and
// Unlock, while masters 0 and 1 answer late (some batches stall past the node
// deadline). Checks: every error is an expected outcome (no reply delivered
// to the wrong caller), no two holders of a key overlap, fences per key
// strictly grow, and once settled, every key left has a TTL.
func TestPipeManyGoroutinesMixedOps(t *testing.T) {
	r := startReal(t, 5)
	for i := range 2 {
		r.clients[i].AddHook(&advDelay{every: 40, long: scaled(150 * time.Millisecond)})
	}
	c := r.client(WithNodeTimeout(scaled(60*time.Millisecond)), WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	const workers, keys = 120, 24
	run := 3 * time.Second
	ctx, stop := context.WithTimeout(bg, run)
	defer stop()
	var inside [keys]atomic.Int32
	var lastFence [keys]atomic.Uint64
	var ops, held atomic.Int64
	var wg sync.WaitGroup
	fail := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := w % keys
			key := fmt.Sprintf("adv:%d", k)
			for i := 0; ctx.Err() == nil; i++ {
				ops.Add(1)
				if (w+i)%7 == 0 { // Do, with a critical section of its own
					err := c.Do(ctx, key, 10*time.Second, func(context.Context) error {
						if inside[k].Add(1) != 1 {
							fail <- "overlap in Do on " + key
						}
						time.Sleep(time.Millisecond)
						inside[k].Add(-1)
						return nil
					})
					if !advExpected(err) && !errors.Is(err, ErrLockLost) {
						fail <- fmt.Sprintf("Do: unexpected %v", err)
					}
					continue
				}
				lctx, cancel := context.WithCancel(ctx)
				if (w+i)%5 == 0 {
					go func() { time.Sleep(time.Duration(i%3) * time.Millisecond); cancel() }()
				}
				l, err := c.TryLock(lctx, key, 10*time.Second)
				cancel()
				if err != nil {
					if !advExpected(err) {
						fail <- fmt.Sprintf("TryLock: unexpected %v", err)
					}
					continue
				}
				held.Add(1)
				if inside[k].Add(1) != 1 {
					fail <- "overlap on " + key
				}
				if err := l.Extend(bg, 10*time.Second); !advExpected(err) {
					fail <- fmt.Sprintf("Extend: unexpected %v", err)
				}
				f, err := l.Fence(bg)
				if !advExpected(err) {
					fail <- fmt.Sprintf("Fence: unexpected %v", err)
				}
				if err == nil {
					for {
						prev := lastFence[k].Load()
						if f <= prev {
							fail <- fmt.Sprintf("fence %d after %d on %s", f, prev, key)
							break
						}
						if lastFence[k].CompareAndSwap(prev, f) {
							break
						}
					}
				}
				inside[k].Add(-1)
				if err := l.Unlock(bg); !advExpected(err) {
					fail <- fmt.Sprintf("Unlock: unexpected %v", err)
				}
			}
		}()
	}
	wg.Wait()
	settle(c)
	close(fail)
	n := 0
	for f := range fail {
		if n < 20 {
			t.Error(f)
		}
		n++
	}
	t.Logf("%d operations, %d locks held", ops.Load(), held.Load())
	if held.Load() == 0 {
		t.Fatal("no lock held")
	}
	for i, a := range r.admin {
		ks, err := a.Keys(bg, "adv:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if strings.Contains(k, "fence") {
				continue
			}
			if ttl, err := a.PTTL(bg, k).Result(); err != nil || ttl < 0 {
				t.Errorf("master %d: key %s without a TTL (%v, %v)", i, k, ttl, err)
			}
		}
	}
}

// SCRIPT FLUSH on three masters, again and again, while many goroutines of
// one Client lock and unlock distinct keys in batches: the NOSCRIPT replies
// inside a batch are run again with EVAL, and every operation succeeds.
func TestPipeScriptFlushMidBatch(t *testing.T) {
	r := startReal(t, 5)
	for i := range 5 {
		r.clients[i].AddHook(&advDelay{}) // a few ms per batch: requests queue
	}
	c := r.client(WithNodeTimeout(scaled(500 * time.Millisecond)))
	ctx, stop := context.WithTimeout(bg, 2*time.Second)
	defer stop()
	var flushes atomic.Int64
	go func() {
		for ctx.Err() == nil {
			for i := range 3 {
				if err := r.admin[i].ScriptFlush(bg).Err(); err == nil {
					flushes.Add(1)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var locks atomic.Int64
	for w := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("flush:%d", w)
			for ctx.Err() == nil {
				l, err := c.TryLock(bg, key, 10*time.Second)
				if err != nil {
					t.Errorf("TryLock(%s): %v", key, err)
					return
				}
				locks.Add(1)
				if _, err := l.Fence(bg); err != nil {
					t.Errorf("Fence(%s): %v", key, err)
					return
				}
				if err := l.Extend(bg, 10*time.Second); err != nil {
					t.Errorf("Extend(%s): %v", key, err)
					return
				}
				if err := l.Unlock(bg); err != nil {
					t.Errorf("Unlock(%s): %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	settle(c)
	t.Logf("%d locks, %d flushes", locks.Load(), flushes.Load())
	for w := range 60 {
		if n := r.count(fmt.Sprintf("flush:%d", w), ""); n != 5 {
			t.Errorf("flush:%d left on %d masters", w, 5-n)
		}
	}
}

// advEvents records, across masters and in the order they reach the
// connection, the script calls sent: "m<i> <script> <key>".
type advEvents struct {
	mu sync.Mutex
	ev []string
}

type advEventHook struct {
	e      *advEvents
	master int
}

func advScriptName(sha string) string {
	for name, s := range map[string]*script.Script{"acquire": script.Acquire, "release": script.Release, "handoff": script.HandOff, "extend": script.Extend, "fence": script.Fence} {
		if sha == s.Hash() || isSource(sha, s) {
			return name
		}
	}
	return "?"
}

func (h advEventHook) log(cmds []redis.Cmder) {
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 4 {
			continue
		}
		if name := strings.ToLower(fmt.Sprint(args[0])); name != "evalsha" && name != "eval" {
			continue
		}
		h.e.ev = append(h.e.ev, fmt.Sprintf("m%d %s %v", h.master, advScriptName(fmt.Sprint(args[1])), args[3]))
	}
}
func (h advEventHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h advEventHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.log([]redis.Cmder{cmd}); return next(ctx, cmd) }
}
func (h advEventHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.log(cmds); return next(ctx, cmds) }
}

func (e *advEvents) index(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, v := range e.ev {
		if v == s {
			return i
		}
	}
	return -1
}

// Found by an adversarial review (failed every run before the fix): the
// hand-off's request (an acquisition of the waiter's new token) had no send
// check, unlike acquire's (hold.send): a
// hand-off request queued behind a stalled batch to master 0 goes out after
// its round was lost and the new lock abandoned (after Unlock's release
// round had started on the other masters). It then replaces the old token
// on master 0 with the abandoned new token, which needs a release of its
// own. (Not a safety violation: the late reply is released.)
func TestPipeHandOffNotSentAfterItsRoundWasLost(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(300 * time.Millisecond)))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	other := mustLock(t, c, "other", time.Minute)
	holder, res := lockWithAWaiter(ctx, t, c, time.Minute)
	ev := &advEvents{}
	for i := range 5 {
		r.clients[i].AddHook(advEventHook{e: ev, master: i})
	}
	h := newBatchHold(script.Release, 1) // the first release batch to master 0 hangs
	r.clients[0].AddHook(h)
	t.Cleanup(h.open)
	go func() { _ = other.Unlock(bg) }()
	<-h.holding
	for _, i := range []int{1, 2, 3} { // "k" expired there: the hand-off is lost
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	err := holder.Unlock(bg)
	t.Logf("Unlock: %v", err)
	h.open()
	cancel()
	if err := <-res; err != nil {
		t.Logf("the waiter: %v", err) // it gives up with ctx: its outcome says nothing here
	}
	settle(c)
	ev.mu.Lock()
	t.Logf("script calls in order: %q", ev.ev)
	ev.mu.Unlock()
	lost := ev.index("m1 release k") // Unlock's deletes: the hand-off round was decided, lost
	late := ev.index("m0 handoff k")
	if lost >= 0 && late > lost {
		t.Fatalf("the hand-off request to master 0 went out (call %d) after its round was lost and Unlock's deletes began (call %d)", late, lost)
	}
}

// advPipeGoroutines returns the stacks of goroutines running code of the
// pipe or of a round.
func advPipeGoroutines() []string {
	var out []string
	for _, g := range strings.Split(leakStacks(), "\n\n") {
		if strings.Contains(g, "redlock.(*pipe)") || strings.Contains(g, "redlock.(*Client).fanOut") ||
			strings.Contains(g, "redlock.(*Client).releaseNode") {
			out = append(out, g)
		}
	}
	return out
}

// Close while up to maxStalledBatches batches to master 0 are stalled and
// requests queue behind them: Close waits for all of them, returns once the
// masters answer, and leaves no goroutine of the pipe behind, then or one
// node deadline later (the pipe's timer).
func TestPipeCloseWhileBatchesStalled(t *testing.T) {
	r := startReal(t, 5)
	d := scaled(200 * time.Millisecond)
	c, err := New(r.clients, WithBatchLimit(3), WithNodeTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, c, "warm", time.Minute)
	h := newBatchHold(script.Acquire, master.MaxStalledBatches+1)
	r.clients[0].AddHook(h)
	t.Cleanup(h.open)
	wg := stallZero(t, r, c, h, d)
	select {
	case <-h.holding:
		t.Fatal("more than maxStalledBatches batches to one master at once")
	case <-time.After(2 * d):
	}
	wg.Wait()
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while batches were out")
	case <-time.After(d / 2):
	}
	h.open()
	within(t, scaled(5*time.Second), "Close", func() bool { <-closed; return true })
	if gs := advPipeGoroutines(); len(gs) > 0 {
		t.Fatalf("after Close: %d goroutines of the pipe or a round:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
	time.Sleep(2 * d)
	if gs := advPipeGoroutines(); len(gs) > 0 {
		t.Fatalf("a node deadline after Close: %d goroutines of the pipe or a round:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
	for i := range 12 {
		if n := r.count(fmt.Sprintf("s%d", i), ""); n != 3 {
			t.Errorf("s%d: keys left: %q", i, r.values(fmt.Sprintf("s%d", i)))
		}
	}
}

// stallZero starts 12 TryLocks, d/8 apart, of keys taken on masters 3
// and 4, so that each needs master 0, whose acquire batches h holds: master
// 0's pipe stalls maxStalledBatches batches, and stallZero returns once h
// holds them. The TryLocks are done when the WaitGroup is.
func stallZero(t *testing.T, r *realNodes, c *Client, h *batchHold, d time.Duration) *sync.WaitGroup {
	t.Helper()
	for i := range 12 {
		for _, m := range []int{3, 4} {
			r.take(m, fmt.Sprintf("s%d", i), "other", time.Minute)
		}
	}
	return stalls(t, h, d, func(i int) { _, _ = c.TryLock(bg, fmt.Sprintf("s%d", i), time.Minute) })
}

// stalls runs op(0) to op(11), d/8 apart, each needing master 0, whose
// batches h holds, so that its pipe stalls maxStalledBatches batches, and
// returns once h holds them. The ops are done when the WaitGroup is.
func stalls(t *testing.T, h *batchHold, d time.Duration, op func(i int)) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * d / 8) // requests keep queueing: stalls follow
			op(i)
		}()
	}
	for range master.MaxStalledBatches {
		within(t, scaled(5*time.Second), "a stalled batch to master 0", func() bool { <-h.holding; return true })
	}
	return &wg
}

func leakStacks() string {
	buf := make([]byte, 1<<22)
	return string(buf[:runtime.Stack(buf, true)])
}

// The guard's fast path across a real restart without persistence, under
// batching load: client b knows master 0's old memory (it has been voting
// there), master 0 restarts empty while b's load is in flight, and a's lock,
// held on masters 0, 1 and 2, must not be taken by b with master 0's young
// yes. b's stale known must not make the restarted master count.
func TestGuardFastPathAcrossARealRestart(t *testing.T) {
	r := startReal(t, 5)
	a := r.client()
	b := r.client(WithNodeTimeout(scaled(300 * time.Millisecond)))
	for _, i := range []int{3, 4} {
		r.take(i, "k", "someone", 2*time.Second) // a gets 0, 1, 2
	}
	held := mustLock(t, a, "k", time.Minute)
	for _, i := range []int{3, 4} {
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	mustLock(t, b, "warm", time.Minute) // b knows every master's memory
	for i, n := range b.nodes {
		if n.known.Load() == nil {
			t.Fatalf("b knows nothing of master %d", i)
		}
	}
	ctx, stop := context.WithCancel(bg)
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if l, err := b.TryLock(ctx, fmt.Sprintf("load:%d", w), time.Minute); err == nil {
					_ = l.Unlock(bg)
				}
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	r.servers[0].Restart()
	time.Sleep(50 * time.Millisecond) // b's load reaches the new memory
	quarantined := 0
	for attempt := range 20 {
		l, err := b.TryLock(bg, "k", time.Minute)
		if errors.Is(err, ErrNodeQuarantined) {
			quarantined++
		}
		if err == nil {
			t.Fatalf("attempt %d: b took k (%q) while a's lock %.8s is valid until %v: %q",
				attempt, l.Token()[:8], held.Token(), held.Until(), r.values("k"))
		}
		if !errors.Is(err, ErrNotObtained) {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	wg.Wait()
	if quarantined == 0 {
		t.Fatal("master 0's yes was never seen quarantined: the restart did not take")
	}
}

// advPipelineDelay delays every pipeline (not lone commands) by d, saying on
// started when one is on its way.
type advPipelineDelay struct {
	d       time.Duration
	started chan struct{}
}

func (h advPipelineDelay) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h advPipelineDelay) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h advPipelineDelay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		select {
		case h.started <- struct{}{}:
		default:
		}
		time.Sleep(h.d) // the delay is the fault
		return next(ctx, cmds)
	}
}

// pipeQueue is how many requests wait in master i's pipe.
func pipeQueue(c *Client, i int) int {
	return c.nodes[i].pipe.Queued()
}

// A batch of two acquisitions to master 0 (which each need it: masters 3
// and 4 are taken) is in flight when one caller's ctx is cancelled; with a
// driver that honours contexts (ContextTimeoutEnabled), the other member of
// the batch still gets its reply and wins.
func TestPipeCancelledMemberDoesNotFailItsBatch(t *testing.T) {
	r := startReal(t, 5)
	r.clients[0] = r.servers[0].Client(&redis.Options{ContextTimeoutEnabled: true})
	c := r.client(WithNodeTimeout(scaled(time.Second)))
	mustLock(t, c, "warm", time.Minute)
	h := newBatchHold(script.Acquire, 1)
	r.clients[0].AddHook(h)
	t.Cleanup(h.open)
	delay := advPipelineDelay{d: scaled(100 * time.Millisecond), started: make(chan struct{}, 1)}
	r.clients[0].AddHook(delay)
	rec := &batchRecorder{}
	r.clients[0].AddHook(rec)
	go func() { _, _ = c.TryLock(bg, "first", time.Minute) }()
	<-h.holding
	for _, k := range []string{"a", "b"} {
		for _, i := range []int{3, 4} {
			r.take(i, k, "other", time.Minute)
		}
	}
	actx, cancelA := context.WithCancel(bg)
	resA := make(chan error, 1)
	resB := make(chan error, 1)
	go func() { _, err := c.TryLock(actx, "a", time.Minute); resA <- err }()
	go func() { _, err := c.TryLock(bg, "b", time.Minute); resB <- err }()
	within(t, scaled(5*time.Second), "a and b queueing behind the held batch", func() bool {
		for pipeQueue(c, 0) < 2 {
			time.Sleep(time.Millisecond) // the pipe's own state: no signal
		}
		return true
	})
	h.open()        // a and b go out as one pipeline, delayed
	<-delay.started // on its way
	cancelA()
	if err := <-resA; !errors.Is(err, context.Canceled) {
		t.Logf("a: %v", err)
	}
	if err := <-resB; err != nil {
		t.Fatalf("b, in the same batch as the cancelled a: %v", err)
	}
	settle(c)
	if n := rec.largest(); n != 2 {
		t.Fatalf("largest batch to master 0: %d, want a and b together", n)
	}
	if n := r.count("a", ""); n != 3 {
		t.Fatalf("a's keys left behind: %q", r.values("a"))
	}
}

// A master at maxmemory (noeviction) inside batches: its scripts answer OOM
// per request, the others in the batch are unaffected; locks are won on the
// other four; nothing is left behind.
func TestPipeMaxmemoryInsideABatch(t *testing.T) {
	r := startReal(t, 5)
	for i := range 5 {
		r.clients[i].AddHook(&advDelay{})
	}
	c := r.client(WithNodeTimeout(scaled(500 * time.Millisecond)))
	mustLock(t, c, "warm", time.Minute)
	r.setMaxmemory(t, "1", 0)
	t.Cleanup(func() { r.setMaxmemory(t, "0", 0) })
	var wg sync.WaitGroup
	for w := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				key := fmt.Sprintf("oom:%d:%d", w, i)
				l, err := c.TryLock(bg, key, time.Minute)
				if err != nil {
					t.Errorf("TryLock(%s) with master 0 at maxmemory: %v", key, err)
					return
				}
				if err := l.Extend(bg, time.Minute); err != nil {
					t.Errorf("Extend(%s): %v", key, err)
				}
				if err := l.Unlock(bg); err != nil {
					t.Errorf("Unlock(%s): %v", key, err)
				}
			}
		}()
	}
	wg.Wait()
	settle(c)
	for w := range 40 {
		for i := range 10 {
			if key := fmt.Sprintf("oom:%d:%d", w, i); r.count(key, "") != 5 {
				t.Errorf("%s left: %q", key, r.values(key))
			}
		}
	}
}

// WithBatchLimit(1) and the default take the same decisions over every
// subset of taken masters.
func TestPipeBatchLimitOneAndDefaultAgree(t *testing.T) {
	for _, limit := range []int{1, master.DefaultBatchLimit} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			r := startReal(t, 5)
			checkAllMasks(t, r.client(WithBatchLimit(limit)), r)
		})
	}
}

// A release queued behind maxStalledBatches stalled batches is still sent
// once one of them returns, though its node deadline passed meanwhile: a
// late delete (of our own token only) is harmless, and dropping it leaves
// the key on that master for its whole TTL. Unlock's round is over at its
// deadline all the same. (Found by the fault generator: an Unlock's key
// stayed on a master that answered every command it was sent.)
func TestAReleaseQueuedBehindStalledBatchesIsStillSent(t *testing.T) {
	r := startReal(t, 5)
	d := scaled(200 * time.Millisecond)
	unlockOnZero := make(chan NodeOutcome, 4)
	c, err := New(r.clients, WithBatchLimit(3), WithNodeTimeout(d), WithObserver(Observer{NodeReply: func(e NodeReplyEvent) {
		if e.Op == "unlock" && e.Key == "k" && e.Node == 0 {
			unlockOnZero <- e.Outcome
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l := mustLock(t, c, "k", time.Minute)
	h := newBatchHold(script.Acquire, master.MaxStalledBatches)
	r.clients[0].AddHook(h)
	t.Cleanup(h.open)
	wg := stallZero(t, r, c, h, d)
	// Every sender of master 0 waits on a stalled batch: the release
	// queues, and its deadline passes there.
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock with masters 1-4 well: %v", err)
	}
	time.Sleep(2 * d) // past the delete's node deadline: a deadline passing has no signal
	if n := r.count("k", l.Token()); n != 1 {
		t.Fatalf("the key holds our token on %d masters before the hang ends, want master 0 only", n)
	}
	select {
	case out := <-unlockOnZero:
		if out == NodeYes {
			t.Fatalf("master 0 deleted the key through %d stalled batches", master.MaxStalledBatches)
		}
		// Dropped at its deadline: the key stays (checked below).
	default:
	}
	h.open()
	wg.Wait()
	settle(c)
	if v := r.admin[0].Get(bg, "k").Val(); v == l.Token() {
		ttl := r.admin[0].PTTL(bg, "k").Val()
		t.Fatalf("master 0 still holds the released key, for another %v: its delete, queued behind the stalled batches past its deadline, was dropped", ttl)
	}
	select {
	case out := <-unlockOnZero:
		if out != NodeYes {
			t.Fatalf("master 0's late delete reported %v, want a late yes", out)
		}
	default:
		t.Fatal("master 0's late delete reported nothing")
	}
}

// A release sent after its node deadline (queued behind stalled batches)
// has a node deadline of its own once it goes: with a driver that honours
// deadlines (ContextTimeoutEnabled), to a master that hangs, it times out
// then, not after the driver's ReadTimeout, and Close does not wait that
// long. (Found by an adversary review of the late releases: sent without
// a deadline, Close waited the whole 20 s ReadTimeout.)
func TestALateReleaseHasANodeDeadlineOfItsOwn(t *testing.T) {
	r := startReal(t, 5)
	const readTimeout = 20 * time.Second
	nodes := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		nodes[i] = s.Client(&redis.Options{ContextTimeoutEnabled: true, ReadTimeout: readTimeout, MaxRetries: -1})
	}
	unlockOnZero := make(chan NodeReplyEvent, 4)
	c, err := New(nodes, WithBatchLimit(3), WithObserver(Observer{NodeReply: func(e NodeReplyEvent) {
		if e.Op == "unlock" && e.Key == "k" && e.Node == 0 {
			unlockOnZero <- e
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		r.servers[0].Resume()
		if !closed {
			_ = c.Close()
		}
	})
	ttl := scaled(5 * time.Second)
	d := c.nodeTimeout(ttl)
	l := mustLock(t, c, "k", ttl)
	// Extensions stall master 0's pipe: unlike failed attempts, they leave
	// no clean-up release to go out beside the late delete.
	e := mustLock(t, c, "e", time.Minute)
	h := newBatchHold(script.Extend, master.MaxStalledBatches)
	nodes[0].AddHook(h)
	t.Cleanup(h.open)
	wg := stalls(t, h, d, func(int) { _ = e.Extend(bg, time.Minute) })
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock with masters 1-4 well: %v", err)
	}
	wg.Wait()         // every extension over: what they queued is past its deadline, and is dropped
	time.Sleep(2 * d) // past the delete's node deadline, in the queue: a deadline passing has no signal
	r.servers[0].Pause()
	sent := time.Now()
	h.open() // the held batches fail at once (their deadlines passed); the late delete goes alone to a hung master
	out := within(t, scaled(5*time.Second), "the late delete's outcome on master 0", func() NodeReplyEvent { return <-unlockOnZero })
	if out.Outcome != NodeTimeout {
		t.Fatalf("the late delete to a hung master: %v (%v), want a timeout", out.Outcome, out.Err)
	}
	if took := time.Since(sent); took > readTimeout/2 {
		t.Fatalf("the late delete timed out %v after it went, its driver's ReadTimeout (%v), not its node deadline (%v)", took, readTimeout, d)
	}
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	within(t, scaled(5*time.Second), "Close with master 0 hung", func() bool { <-done; return true })
	closed = true
}
