// Scenario 20, the whole-API fault generator: random calls through the
// public API under random faults (its properties are checked in
// chaos_properties_test.go).

package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/chaos"
)

// The whole-API fault generator (scenario 20), in the spirit of Jepsen: no
// scripted scenario, but workers drawing random operations through the
// public API — TryLock, Lock and Do with random deadlines and TTLs, Extend
// to shorter and longer TTLs, concurrent Extends and Unlocks on one Lock,
// Fence (again, and after Unlock; inside Do through LockFromContext), Close
// with calls in flight — over a few keys and a few Clients (shared by
// several workers, so that locks pass by hand-off), while a seeded
// chaos.Schedule injects faults, now and then on a majority. It checks
// properties, not outcomes:
//
//  1. no two holders' windows on a key overlap (chaos.History), a window
//     running from the acquire call's return to the earlier of its Unlock
//     call and the latest Until() it was told (read after every Extend,
//     whatever it returned); for Do, from fn's start to fn's return or its
//     context's end;
//  2. Until() is never later than the keys' real expiry on a majority
//     (sampled: GET+PTTL on the masters themselves);
//  3. once the clients are closed, no lock key lives longer than the
//     largest TTL, and after that long none is left (fence counters never
//     expire);
//  4. every call returns within its bound: TryLock and Extend the node
//     deadline, Unlock two (a hand-off round, then a release round), Fence
//     two (a round, then the write-back), Lock and Do's wait their ctx
//     deadline, plus slack; Close go-redis's timeouts; and calls on a
//     Client whose Close returned return ErrClosed at once;
//  5. no goroutine outlives the run (goleak);
//  6. Unlock releases: after it, no node that stayed up and reachable
//     since the lock was requested, and answered every command that
//     carried the token, keeps the token (out of memory and without channel
//     rights count as up: DEL needs neither);
//  7. liveness: while a majority of the nodes is up, reachable and not out
//     of memory, a TryLock of a free key succeeds within three attempts,
//     whether or not the ACL user may publish there;
//  8. fences (chaos.FenceStore): per key, a holder whose Fence call began
//     after another holder's returned gets a higher fence, no two holders
//     get the same one, one lock gets the same one each time, and the
//     store the holders write through (refusing a fence below one it
//     accepted) never refuses a holder before its Until; Fence after
//     Unlock is ErrNotHeld. The schedule restarts masters without their
//     data (KilledEmpty), which may lose the counters under a fence, and
//     a single master of the fence's majority losing its counter is enough
//     to repeat it (A's fence 1 on masters 0–2, master 2 restarted empty,
//     B's on 2–4 is 1 again), not only a majority. So a pair of fences is
//     not checked when any master lost its data between them:
//     the first's Fence call began before a moment the master was seen
//     down (its old data gone) and the second's returned after the last
//     such moment (new data from then on); WatchDataLoss finds those
//     moments by dialing the master while the schedule has it KilledEmpty.
//     Pairs drawn while it was down are still checked, and so are all
//     pairs on either side of the outage.
//
// Every call's outcome is counted per kind; a kind that never succeeded
// fails the run, which would otherwise prove nothing. -chaos.ops sets the
// number of calls (make chaos-soak runs more).

var genOpsFlag = flag.Int("chaos.ops", 0, "calls the whole-API fault generator (scenario 20) makes; default 20000")

// The ACL users the generator's clients connect as; Admin stays the
// default user. The schedule revokes the channel rights of chaosUser only:
// a Client that meets a master refusing its notices stops handing locks
// over, and chaosService's Clients keep them, as a second service with its
// own ACL user would.
const (
	chaosUser     = "app"
	chaosService  = "svc"
	chaosPassword = "chaos-pw"
	chaosUserRule = chaosUser + " on >" + chaosPassword + " ~* +@all &*"
	chaosSvcRule  = chaosService + " on >" + chaosPassword + " ~* +@all &*"
)

// The generator's timings, all scaled.
var (
	genMinTTL    = scaled(50 * time.Millisecond)
	genMaxTTL    = scaled(time.Second)
	genGuard     = genMaxTTL                     // the restart guard: the longest TTL the generator uses
	genWork      = scaled(3 * time.Millisecond)  // the longest critical section of a step
	genLeaseWait = scaled(15 * time.Millisecond) // a property-2 read of one master
	genPace      = scaled(100 * time.Millisecond)
	// Liveness slack: calls race genWorkers workers, the schedule and the
	// property checks for 2 cores, and fsyncs (appendfsync always) stall
	// the masters.
	genSlack       = 2 * chaosSlack
	genOpLimit     = chaosNodeD + genSlack   // TryLock, Extend
	genUnlockLimit = 2*chaosNodeD + genSlack // Unlock: a hand-off round, then a release round
	genWaitLimit   = 2*chaosNodeD + genSlack // Lock and Do after their ctx deadline: a hand-off served as ctx ended is unlocked
	genAfterFn     = 3*chaosNodeD + genSlack // Do after fn: the watchdog's Extend, then Unlock
	genFenceLimit  = 2*chaosNodeD + genSlack // Fence: a round, then the write-back
	// Close waits for requests in flight, which go-redis with its defaults
	// may hold for its 3 s read timeout on each of its 4 tries.
	genCloseLimit = 4*3*time.Second + scaled(3*time.Second)
	// A call this far past its bound has stalled: see stalled.
	genStall = scaled(500 * time.Millisecond)
)

// Workers, and slots of Clients they share: worker w mostly uses slot
// w % genSlots.
const (
	genWorkers = 24
	genSlots   = 6
	genShared  = 6 // keys every Client contends for
)

var (
	errFn    = errors.New("chaos: fn failed")
	errPanic = errors.New("chaos: fn panicked")
)

type generator struct {
	s        *scenario
	sched    *chaos.Schedule
	tally    chaos.Tally
	keys     []string
	profiles [][]redis.UniversalClient // go-redis clients of the ACL users, per option set
	slots    []*genSlot
	probe    *Client // property 7's
	target   int64
	calls    chaos.Calls // which nodes answered every command carrying a token
	fences   *chaos.FenceStore

	ops         atomic.Int64 // API calls made
	handOffs    atomic.Int64 // of the Clients already closed
	remote      atomic.Int64 // hand-offs to another Client's waiter, of the Clients already closed
	handed      atomic.Int64 // locks taken by such a hand-off, of the Clients already closed
	leaseChecks atomic.Int64
	relChecks   atomic.Int64
	bg          sync.WaitGroup // Closes and property-6 checks in the background

	dumped atomic.Bool // a stalled call's goroutine dump was taken

	mu         sync.Mutex
	dump       string                    // of the first stalled call
	violations map[string][]genViolation // by property: the first few
	counts     map[string]int            // by property
	nclients   int
}

// A genViolation is a property's failure, about key when not "".
type genViolation struct {
	key string
	at  time.Time
	msg string
}

// The properties, as failures name them.
const (
	pOverlap  = "1 two holders at once"
	pUntil    = "2 Until later than the keys"
	pExpiry   = "3 a key outlives its TTL"
	pBound    = "4 a call over its time bound"
	pClosed   = "4 a call on a closed Client"
	pRelease  = "6 Unlock left a key"
	pProgress = "7 no progress with a majority up"
	pFence    = "8 fences out of order"
	pOutcome  = "an outcome the API does not document"
	pEvents   = "9 observer events that contradict the calls"
	pValue    = "10 a lock key holds what no lock put there"
)

// A genSlot is where workers find a Client; Close replaces it.
type genSlot struct {
	mu sync.Mutex
	c  *genClient
}

type genClient struct {
	*Client
	name   string
	closed atomic.Bool // its Close has returned
}

func generate(s *scenario) {
	leaks := goleak.IgnoreCurrent()
	began := time.Now()
	g := &generator{s: s, target: 20000}
	if *genOpsFlag > 0 {
		g.target = int64(*genOpsFlag)
	}
	// Keys every Client contends for, and one per slot that only
	// its Client uses, where Unlock may hand the lock to a waiter of the
	// same Client (it does not while other Clients want the key).
	for i := range genShared {
		g.keys = append(g.keys, fmt.Sprintf("chaos:gen:k%d", i))
	}
	for i := range genSlots {
		g.keys = append(g.keys, fmt.Sprintf("chaos:gen:own%d", i))
	}
	// Every master persists each write before answering, so a kill and
	// restart is safe whenever it comes (Redlock spec, "Performance, crash
	// recovery and fsync").
	for _, n := range s.cl.Nodes {
		s.fault(n.EnableAOF())
	}
	user := redis.Options{Username: chaosUser, Password: chaosPassword}
	ctxUser := user
	ctxUser.ContextTimeoutEnabled = true
	svc := redis.Options{Username: chaosService, Password: chaosPassword}
	// Property 5 counts only connections this run opens: the suite's
	// shared clients keep idle connections from earlier scenarios, which
	// only a fault on their master happens to close.
	preexisting, _ := s.cl.ClientConns()
	s.t.Logf("property 5: %d connections of earlier scenarios' clients open at the start, not counted", len(preexisting))
	g.profiles = [][]redis.UniversalClient{s.cl.Clients(&user), s.cl.Clients(&ctxUser), s.cl.Clients(&svc)}
	for _, cs := range g.profiles {
		for i, c := range cs {
			c.AddHook(g.calls.Hook(i))
		}
	}
	for range genSlots {
		g.slots = append(g.slots, &genSlot{c: g.newClient(len(g.slots))})
	}
	g.probe = g.newClient(0).Client
	g.sched = s.cl.NewSchedule(chaos.ScheduleOptions{
		Seed: s.seed, NodeDeadline: chaosNodeD, MaxTTL: genMaxTTL, User: chaosUser,
		Pace: genPace, MaxFaulty: len(s.cl.Nodes) - quorum(len(s.cl.Nodes)), EpisodeOdds: 0.05,
		Settle: 2 * time.Second, Quarantine: genGuard + 2*time.Second, History: s.hist,
	})
	// Property 8's store, told of every restart without data from the
	// schedule's start until its end.
	g.fences = chaos.NewFenceStore(s.hist)
	watchCtx, stopWatch := context.WithCancel(bg)
	watched := make(chan struct{})
	go func() { defer close(watched); g.fences.WatchDataLoss(watchCtx, s.cl, g.sched, time.Millisecond) }()

	schedCtx, stopSched := context.WithCancel(bg)
	schedErr := make(chan error, 1)
	go func() {
		err := errors.New("chaos: the schedule stopped (a restart failed)")
		defer func() { schedErr <- err }()
		err = g.sched.Run(schedCtx)
	}()
	probeCtx, stopProbe := context.WithCancel(bg)
	probed := make(chan struct{})
	go func() { defer close(probed); g.prober(probeCtx) }()
	sampled := make(chan struct{})
	go func() { defer close(sampled); g.sampleValues(probeCtx) }()

	var workers sync.WaitGroup
	for w := range genWorkers {
		workers.Add(1)
		go func() { defer workers.Done(); g.worker(w) }()
	}
	g.await(&workers, "the workers")
	ran := time.Since(began)
	stopProbe()
	<-probed
	<-sampled
	stopSched()
	if err := <-schedErr; err != nil {
		s.t.Error(err)
	}
	stopWatch()
	<-watched
	s.cl.Heal()

	// Property 4 for Close, and the hand-offs of the Clients still open.
	for _, sl := range g.slots {
		g.close(sl.c)
	}
	g.close(&genClient{Client: g.probe, name: "probe"})
	g.await(&g.bg, "Closes and release checks")
	for _, p := range g.profiles {
		for _, rc := range p {
			_ = rc.Close()
		}
	}

	g.checkExpiry()
	g.checkFences()
	s.t.Logf("%d calls in %v (%.0f/s) by %d workers over %d keys and %d Clients; %d hand-offs within a Client, %d to another Client's waiter (%d taken so); %d Until checks, %d release checks\n%s\nfences: %v\nschedule: %s",
		g.ops.Load(), ran.Round(time.Millisecond), float64(g.ops.Load())/ran.Seconds(), genWorkers, len(g.keys),
		g.nclients, g.handOffs.Load(), g.remote.Load(), g.handed.Load(), g.leaseChecks.Load(), g.relChecks.Load(), &g.tally, g.fences.Stats(), g.sched)
	g.report()
	// Property 5. The proxy's own goroutines may outlive a connection (see
	// TestMain); that no client connection outlives its Client is checked
	// on the sockets instead.
	for wait := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) { // sockets close asynchronously
		n, ok := s.cl.NewConns(preexisting)
		if !ok || n == 0 {
			break
		}
		if time.Now().After(wait) {
			s.t.Errorf("seed %d: %d connections to the masters are still open after every Client and go-redis client closed", s.seed, n)
			// Who may still hold one: every goroutine in go-redis or here.
			buf := make([]byte, 8<<20)
			for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
				if strings.Contains(gr, "go-redis") || strings.Contains(gr, "redlock.") {
					s.t.Logf("goroutine:\n%s", gr)
				}
			}
			break
		}
	}
	noLeaks(s.t, leaks,
		// The process-exit watcher of each master the schedule restarted.
		goleak.IgnoreAnyFunction("github.com/redlock-go/redlock/internal/redistest.(*Server).start.func1"))
}

// await waits for wg, failing the run with every goroutine's stack if no
// call returned for far longer than any call may take.
func (g *generator) await(wg *sync.WaitGroup, what string) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stall := genCloseLimit + scaled(10*time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, progressed := g.ops.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if n := g.ops.Load(); n != last {
			last, progressed = n, time.Now()
		} else if time.Since(progressed) > stall {
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
			g.s.t.Fatalf("%s: no call returned for %v (seed %d); goroutines:\n%s", what, stall, g.s.seed, b.String())
		}
	}
}

func (g *generator) newClient(profile int) *genClient {
	nodes := g.profiles[profile%len(g.profiles)]
	g.mu.Lock()
	defer g.mu.Unlock()
	opts := []Option{WithNodeTimeout(chaosNodeD), WithRestartGuard(genGuard), WithObserver(g.eventChecker(len(nodes)))}
	if g.nclients%2 == 1 {
		// Every other Client asks a majority first (WithQuorumFirst),
		// contending with the others on the same keys.
		opts = append(opts, WithQuorumFirst())
	}
	c, err := New(nodes, opts...)
	if err != nil {
		g.s.t.Fatal(err)
	}
	g.nclients++
	return &genClient{Client: c, name: fmt.Sprintf("c%d", g.nclients)}
}

// eventChecker is an Observer that checks property 9 on one Client's
// events, whatever the faults: an acquisition's outcome agrees with its
// error; a round's votes are its masters' yes answers; a master's state
// changes alternate, failing first (transitions only).
func (g *generator) eventChecker(nodes int) Observer {
	var mu sync.Mutex
	failing := make([]bool, nodes)
	return Observer{
		Acquire: func(e AcquireEvent) {
			if (e.Err == nil) != (e.Outcome == AcquireObtained) || e.Outcome < AcquireObtained || e.Outcome > AcquireFailed {
				g.violation(pEvents, e.Key, "%s: Acquire outcome %v with error %v", e.Op, e.Outcome, e.Err)
			}
		},
		Round: func(e RoundEvent) {
			yes := 0
			for _, n := range e.Nodes {
				if n.Outcome == NodeYes {
					yes++
				}
			}
			if len(e.Nodes) != nodes || yes != e.Votes {
				g.violation(pEvents, e.Key, "%s round: %d votes, %d masters said yes, %d of %d masters reported", e.Op, e.Votes, yes, len(e.Nodes), nodes)
			}
		},
		NodeReply: func(e NodeReplyEvent) {
			// For property 6's report: where a delete did not go through.
			if e.Op == "unlock" && e.Outcome != NodeYes {
				g.s.hist.NoteKey(e.Key, "unlock on master %d: %v after %v (%v)", e.Node, e.Outcome, e.Latency.Round(time.Millisecond), e.Err)
			}
		},
		NodeState: func(e NodeStateEvent) {
			mu.Lock()
			defer mu.Unlock()
			if e.Node < 0 || e.Node >= nodes || failing[e.Node] == !e.Healthy {
				g.violation(pEvents, "", "master %d: NodeState healthy=%v twice in a row (or out of range)", e.Node, e.Healthy)
				return
			}
			failing[e.Node] = !e.Healthy
		},
	}
}

// violation records a failure of property p about key (or none: ""). The
// run stops early after very many.
func (g *generator) violation(p, key, format string, args ...any) {
	g.violationAt(p, key, time.Now(), format, args...)
}

// violationAt is violation for a failure that showed at at, found later.
func (g *generator) violationAt(p, key string, at time.Time, format string, args ...any) {
	v := genViolation{key: key, at: at, msg: fmt.Sprintf(format, args...)}
	g.s.hist.NoteKey(key, "VIOLATION of %s: %s", p, v.msg)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.counts == nil {
		g.counts, g.violations = map[string]int{}, map[string][]genViolation{}
	}
	g.counts[p]++
	if len(g.violations[p]) < 3 {
		g.violations[p] = append(g.violations[p], v)
	}
}

func (g *generator) failing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, c := range g.counts {
		n += c
	}
	return n >= 500
}

// stalled arms a dump of every goroutine's stack, taken once per run, for
// a call still running at limit (well past its bound): the state of a hang
// is gone by the time the call returns. Call the result when it does.
func (g *generator) stalled(what string, limit time.Duration) (stop func() bool) {
	return time.AfterFunc(limit, func() {
		if g.dumped.Swap(true) {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s still running after %v; goroutines:\n", what, limit)
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		g.mu.Lock()
		g.dump = b.String()
		g.mu.Unlock()
	}).Stop
}

// within checks property 4 for one call about key ("" for none).
func (g *generator) within(key, what string, took, limit time.Duration, err error) {
	if took > limit {
		g.violation(pBound, key, "%s of %q returned after %v, over its bound %v (%v)", what, key, took.Round(time.Millisecond), limit, err)
	}
}

// outcome names err for the tally.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLockLost): // also when the watchdog's Extend found the Client closed
		return "lock lost"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, errFn):
		return "fn error"
	case errors.Is(err, ErrNotHeld):
		return "not held"
	case errors.Is(err, ErrNotObtained):
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return "not obtained (ctx)"
		}
		return "not obtained"
	}
	return "unexpected"
}

// count tallies a call of kind and checks its outcome is one of allowed;
// on a Client whose Close had returned when the call began, closed says
// which outcomes remain allowed.
func (g *generator) count(kind string, err error, afterClose bool, allowed, closed []string) string {
	g.ops.Add(1)
	o := outcome(err)
	g.tally.Add(kind, o)
	if afterClose {
		allowed = closed
	}
	if !slices.Contains(allowed, o) {
		if afterClose {
			g.violation(pClosed, "", "%s on a closed Client: %v, want one of %v", kind, err, allowed)
		} else {
			g.violation(pOutcome, "", "%s: unexpected outcome %q: %v", kind, o, err)
		}
	}
	return o
}

var (
	acquireOutcomes = []string{"ok", "not obtained", "not obtained (ctx)", "closed"}
	extendOutcomes  = []string{"ok", "not obtained", "not obtained (ctx)", "not held", "closed"}
	unlockOutcomes  = []string{"ok", "not held", "closed"}
	resumeOutcomes  = []string{"ok", "not held", "closed"}
	closedOutcomes  = []string{"closed"}
	closedLockOps   = []string{"closed", "not held"} // Extend or Unlock of an expired or released lock says so first
)

// ttl draws a TTL log-uniformly in [genMinTTL, genMaxTTL].
func (g *generator) ttl(rng *rand.Rand) time.Duration {
	return logUniform(rng, genMinTTL, genMaxTTL)
}

func logUniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), rng.Float64()))
}

func (g *generator) work(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Int64N(int64(genWork)))
}

// callCtx is a context for TryLock, Extend and Unlock: mostly none, now and
// then one that ends during the call or has already ended.
func callCtx(rng *rand.Rand) (context.Context, context.CancelFunc) {
	switch r := rng.IntN(20); {
	case r < 2:
		ctx, cancel := context.WithCancel(bg)
		cancel()
		return ctx, cancel
	case r < 5:
		return context.WithTimeout(bg, time.Duration(rng.Int64N(int64(chaosNodeD))))
	}
	return context.WithCancel(bg)
}

// waitCtx is a context for Lock and Do's wait: already ended, short
// (within a node deadline), or long enough to wait through a release.
func waitCtx(rng *rand.Rand, extra time.Duration) (context.Context, context.CancelFunc) {
	var d time.Duration
	switch r := rng.IntN(20); {
	case r < 2:
	case r < 6:
		d = time.Duration(rng.Int64N(int64(chaosNodeD)))
	default:
		d = logUniform(rng, chaosNodeD, scaled(800*time.Millisecond))
	}
	if d == 0 {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		return ctx, cancel
	}
	return context.WithTimeout(bg, d+extra)
}

func (g *generator) worker(w int) {
	rng := rand.New(rand.NewPCG(g.s.seed, uint64(w)+1))
	name := fmt.Sprintf("w%d", w)
	for g.ops.Load() < g.target && !g.failing() {
		// Mostly the worker's own slot, which one other worker shares.
		i := w % genSlots
		if rng.IntN(8) == 0 {
			i = rng.IntN(genSlots)
		}
		sl := g.slots[i]
		sl.mu.Lock()
		gc := sl.c
		sl.mu.Unlock()
		key := g.keys[rng.IntN(genShared)]
		if rng.IntN(3) == 0 {
			key = g.keys[genShared+i] // the slot's own
		}
		switch r := rng.IntN(220); {
		case r < 90:
			g.tryLockSession(rng, name, gc, key)
		case r < 150:
			g.lockSession(rng, name, gc, key)
		case r < 199:
			g.doSession(rng, name, gc, key)
		case r < 219:
			g.multiSession(rng, name, gc, key)
		default:
			g.replace(rng)
		}
	}
}

// multiSession takes two or three keys as one lock (TryLockMulti or
// LockMulti): each key gets its window in the history, so property 1
// holds it against every other holder of any of its keys; then maybe
// Extends with property 2 on every key, and Unlock with property 6 on
// every key.
func (g *generator) multiSession(rng *rand.Rand, name string, gc *genClient, first string) {
	keys := []string{first}
	for n := 2 + rng.IntN(2); len(keys) < n; {
		if k := g.keys[rng.IntN(len(g.keys))]; !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	ttl := g.ttl(rng)
	kind, limit := "TryLockMulti", genOpLimit
	ctx, cancel := callCtx(rng)
	if rng.IntN(2) == 0 {
		cancel()
		kind, limit = "LockMulti", genWaitLimit
		ctx, cancel = waitCtx(rng, 0)
	}
	deadline, _ := ctx.Deadline()
	health := g.sched.Health()
	afterClose := gc.closed.Load()
	start := time.Now()
	stop := g.stalled(kind, max(time.Until(deadline), 0)+limit+genStall)
	var l *Lock
	var err error
	if kind == "LockMulti" {
		l, err = gc.LockMulti(ctx, keys, ttl)
	} else {
		l, err = gc.TryLockMulti(ctx, keys, ttl)
	}
	returned := time.Now()
	stop()
	cancel()
	g.count(kind, err, afterClose, acquireOutcomes, closedOutcomes)
	if kind == "TryLockMulti" {
		g.within(first, kind, returned.Sub(start), limit, err)
	} else if !deadline.IsZero() {
		g.within(first, kind, returned.Sub(deadline), limit, err)
	}
	if err != nil {
		return
	}
	holder := name + "/" + gc.name
	xs := make([]*chaos.Hold, len(keys))
	for i, k := range keys {
		xs[i] = g.s.hist.Acquired(holder, k, l.Token(), l.Until())
		g.s.hist.NoteKey(k, "%s %s %q %.8s (%v): Until %+v", holder, kind, keys, l.Token(), ttl, time.Until(l.Until()).Round(time.Millisecond))
	}
	for steps := rng.IntN(3); steps > 0 && time.Now().Before(l.Until()); steps-- {
		if rng.IntN(2) == 0 {
			xs[0].Section(g.work(rng))
			continue
		}
		g.extend(rng, gc, l, xs[0], "Extend (multi)")
		for _, x := range xs[1:] {
			x.Told(l.Until(), time.Now())
		}
		g.checkLease(l, "after Extend (multi)")
	}
	for _, x := range xs {
		x.Releasing()
	}
	uctx, ucancel := callCtx(rng)
	before := g.settledBefore(holder, l.Token())
	ustart := time.Now()
	stop = g.stalled("Unlock (multi)", genUnlockLimit+genStall)
	err = l.Unlock(uctx)
	took := time.Since(ustart)
	stop()
	ucancel()
	o := g.count("Unlock (multi)", err, gc.closed.Load(), unlockOutcomes, closedLockOps)
	g.within(first, "Unlock (multi)", took, genUnlockLimit, err)
	for _, k := range keys {
		g.s.hist.NoteKey(k, "%s Unlock (multi) %.8s: %s (%v)", holder, l.Token(), o, err)
		if !errors.Is(err, ErrClosed) {
			g.checkRelease(k, l.Token(), health, holder, ustart, before)
		}
	}
}

func (g *generator) tryLockSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	ctx, cancel := callCtx(rng)
	health := g.sched.Health()
	afterClose := gc.closed.Load()
	start := time.Now()
	stop := g.stalled("TryLock", genOpLimit+genStall)
	l, err := gc.TryLock(ctx, key, ttl)
	took := time.Since(start)
	stop()
	cancel()
	g.count("TryLock", err, afterClose, acquireOutcomes, closedOutcomes)
	g.within(key, "TryLock", took, genOpLimit, err)
	if err == nil {
		g.held(rng, name+"/"+gc.name, "TryLock", ttl, gc, l, health, start)
	}
}

func (g *generator) lockSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	ctx, cancel := waitCtx(rng, 0)
	deadline, _ := ctx.Deadline()
	health := g.sched.Health()
	afterClose := gc.closed.Load()
	stop := g.stalled("Lock", max(time.Until(deadline), 0)+genWaitLimit+genStall)
	start := time.Now()
	l, err := gc.Lock(ctx, key, ttl)
	returned := time.Now()
	stop()
	cancel()
	g.count("Lock", err, afterClose, acquireOutcomes, closedOutcomes)
	if !deadline.IsZero() {
		g.within(key, "Lock", returned.Sub(deadline), genWaitLimit, err)
	}
	if err == nil {
		g.held(rng, name+"/"+gc.name, "Lock", ttl, gc, l, health, start)
	}
}

// held is what a holder does with a lock whose acquisition began at
// acquiring: maybe its Fence, a few steps of work, Extends and property-2
// checks, maybe Fence again, then Unlock (alone or racing an Extend, and
// maybe Fence after it), or rarely nothing, letting a short lock expire.
func (g *generator) held(rng *rand.Rand, holder, how string, ttl time.Duration, gc *genClient, l *Lock, health chaos.Health, acquiring time.Time) {
	g.heldAt(rng, holder, how, ttl, gc, l, health, acquiring, 0)
}

// heldAt is held for a lock passed on depth times by Resume.
func (g *generator) heldAt(rng *rand.Rand, holder, how string, ttl time.Duration, gc *genClient, l *Lock, health chaos.Health, acquiring time.Time, depth int) {
	fh := genFencer{name: holder + "/" + l.Token()[:8], gc: gc, l: l, acquiring: acquiring, acquired: time.Now()}
	fence := func(kind string) uint64 {
		ctx, cancel := callCtx(rng)
		defer cancel()
		return g.fence(ctx, kind, fh)
	}
	x := g.s.hist.Acquired(holder, l.Key(), l.Token(), l.Until())
	g.s.hist.NoteKey(l.Key(), "%s %s %.8s (%v): Until %+v", holder, how, l.Token(), ttl, time.Until(l.Until()).Round(time.Millisecond))
	if rng.IntN(8) == 0 {
		g.checkLease(l, "after the acquisition")
	}
	if rng.IntN(16) == 0 {
		g.strike(rng, l.Key())
	}
	var f uint64
	if rng.IntN(3) == 0 {
		f = fence("Fence")
	}
	for steps := rng.IntN(4); steps > 0 && time.Now().Before(l.Until()); steps-- {
		switch r := rng.IntN(10); {
		case r < 3:
			x.Section(g.work(rng))
		case r < 7:
			what := g.extend(rng, gc, l, x, "Extend")
			if rng.IntN(3) == 0 {
				g.checkLease(l, "after "+what)
			}
		case r < 9:
			g.checkLease(l, "after "+g.extendPair(rng, gc, l, x))
		default:
			if rng.IntN(2) == 0 {
				g.inspect(rng, gc, l)
			}
			g.checkLease(l, "while held")
		}
	}
	if f > 0 && rng.IntN(2) == 0 {
		fence("Fence (again)")
	}
	switch r := rng.IntN(20); {
	case r == 0 && time.Until(l.Until()) < scaled(250*time.Millisecond):
		g.s.hist.NoteKey(l.Key(), "%s abandons %.8s", holder, l.Token())
	case r < 4:
		// Either may go first, by up to about one round: an Extend that
		// finishes before Unlock begins succeeds.
		x.Releasing()
		extendFirst := rng.IntN(2) == 0
		stagger := time.Duration(rng.Int64N(int64(scaled(2 * time.Millisecond))))
		r2 := rand.New(rand.NewPCG(rng.Uint64(), 0))
		done := make(chan struct{})
		go func() {
			defer close(done)
			if !extendFirst {
				time.Sleep(stagger) // Unlock first
			}
			g.extend(r2, gc, l, x, "Extend (racing Unlock)")
		}()
		if extendFirst {
			time.Sleep(stagger) // Extend first
		}
		g.unlock(rng, holder, gc, l, health, "Unlock (racing Extend)")
		<-done
	case r == 19 && depth < 3:
		x.Releasing() // the first holder stops using its Lock once it passes the token on
		g.resume(rng, holder, gc, l, depth)
	default:
		x.Releasing()
		g.unlock(rng, holder, gc, l, health, "Unlock")
		if rng.IntN(4) == 0 {
			fence("Fence (after Unlock)")
		}
	}
}

// inspect runs Inspect on l's key, as an operator's dashboard would while
// the lock is held, and checks its outcome and bound. (What it answers is
// a snapshot: a master that lost our key may hold a failed attempt's, so
// it proves nothing of the lock.)
func (g *generator) inspect(rng *rand.Rand, gc *genClient, l *Lock) {
	ctx, cancel := callCtx(rng)
	afterClose := gc.closed.Load()
	start := time.Now()
	stop := g.stalled("Inspect", genOpLimit+genStall)
	in, err := gc.Inspect(ctx, l.Key())
	took := time.Since(start)
	stop()
	cancel()
	g.count("Inspect", err, afterClose, acquireOutcomes, closedOutcomes)
	g.within(l.Key(), "Inspect", took, genOpLimit, err)
	if err == nil && in.Answered < in.Quorum {
		g.violation(pOutcome, l.Key(), "Inspect returned no error with %d answers of %d", in.Answered, in.Masters)
	}
}

// resume passes holder's lock l on to a Client of any slot (its own
// included), as a job system passes a job's lock to the worker that
// finishes it: Resume by its token there, then that holder goes on with the
// lock as any other (property 1 checks its window like any other). When
// Resume fails, the first holder releases the lock it stopped using.
func (g *generator) resume(rng *rand.Rand, holder string, gc *genClient, l *Lock, depth int) {
	sl := g.slots[rng.IntN(genSlots)]
	sl.mu.Lock()
	to := sl.c
	sl.mu.Unlock()
	ttl := g.ttl(rng)
	ctx, cancel := callCtx(rng)
	health := g.sched.Health()
	afterClose := to.closed.Load()
	start := time.Now()
	stop := g.stalled("Resume", genOpLimit+genStall)
	l2, err := to.Resume(ctx, l.Key(), l.Token(), ttl)
	took := time.Since(start)
	stop()
	cancel()
	o := g.count("Resume", err, afterClose, resumeOutcomes, closedOutcomes)
	g.within(l.Key(), "Resume", took, genOpLimit, err)
	g.s.hist.NoteKey(l.Key(), "%s passes %.8s on to %s: Resume: %s (%v)", holder, l.Token(), to.name, o, err)
	if err != nil {
		g.unlock(rng, holder, gc, l, health, "Unlock (not resumed)")
		return
	}
	g.heldAt(rng, holder+">"+to.name, "Resume", ttl, to, l2, health, start, depth+1)
}

// A genFencer is a holder as Fence sees it: name is unique per lock (the
// store's holder), and its acquisition began at acquiring and returned at
// acquired.
type genFencer struct {
	name                string
	gc                  *genClient
	l                   *Lock
	acquiring, acquired time.Time
}

// The outcomes of each kind of Fence call. A second Fence returns the
// lock's fence without asking the masters, so neither fails to reach them
// nor finds the Client closed: Close releases nothing, and the lock is
// held until Until. After Unlock the lock is not held, whatever Unlock
// returned.
var fenceOutcomes = map[string]struct{ allowed, closed []string }{
	"Fence":                {[]string{"ok", "not held", "not obtained", "not obtained (ctx)", "closed"}, closedLockOps},
	"Fence (in Do)":        {[]string{"ok", "not held", "not obtained", "not obtained (ctx)", "closed"}, closedLockOps},
	"Fence (again)":        {[]string{"ok", "not held"}, []string{"ok", "not held"}},
	"Fence (after Unlock)": {[]string{"not held"}, []string{"not held"}},
}

// fence runs one Fence call of kind for h, checking its outcome and bound
// (property 4), records the fence it got in the store (property 8), and
// writes through the store with it; it returns the fence, or 0.
func (g *generator) fence(ctx context.Context, kind string, h genFencer) uint64 {
	afterClose := h.gc.closed.Load()
	key := h.l.Key()
	asked := time.Now()
	stop := g.stalled(kind, genFenceLimit+genStall)
	f, err := h.l.Fence(ctx)
	got := time.Now()
	stop()
	o := g.count(kind, err, afterClose, fenceOutcomes[kind].allowed, fenceOutcomes[kind].closed)
	g.within(key, kind, got.Sub(asked), genFenceLimit, err)
	g.s.hist.NoteKey(key, "%s %s: %s %d (%v)", h.name, kind, o, f, err)
	if err != nil {
		return 0
	}
	g.fences.Obtained(chaos.FenceRecord{Key: key, Holder: h.name, Fence: f, Acquiring: h.acquiring, Acquired: h.acquired, Asked: asked, Got: got})
	g.fences.Write(key, h.name, f, h.l.Until())
	return f
}

// extend runs one Extend of l to a random TTL, and describes it.
func (g *generator) extend(rng *rand.Rand, gc *genClient, l *Lock, x *chaos.Hold, kind string) string {
	ttl := g.ttl(rng)
	ctx, cancel := callCtx(rng)
	afterClose := gc.closed.Load()
	start := time.Now()
	left := l.Until().Sub(start)
	stop := g.stalled(kind, genOpLimit+genStall)
	err := l.Extend(ctx, ttl)
	took := time.Since(start)
	stop()
	cancel()
	until := l.Until()
	x.Told(until, time.Now())
	o := g.count(kind, err, afterClose, extendOutcomes, closedLockOps)
	g.within(l.Key(), kind, took, genOpLimit, err)
	g.s.hist.NoteKey(l.Key(), "%s %.8s (%v): %s, Until now %+v", kind, l.Token(), ttl, o, time.Until(until).Round(time.Millisecond))
	return fmt.Sprintf("Extend(%v) with %v left: %s", ttl.Round(time.Millisecond), left.Round(time.Millisecond), o)
}

// strike lands a fault while a lock is held, where it changes what its
// Extends and its Unlock (a hand-off, a release) meet: most often a master
// that answers OOM to the hand-off's SET, or no longer lets the user
// publish, or answers late.
func (g *generator) strike(rng *rand.Rand, key string) {
	f := chaos.OutOfMemory
	switch rng.IntN(4) {
	case 0:
		f = chaos.ChannelsRevoked
	case 1:
		f = chaos.LateReplies
	}
	i, err := g.sched.Strike(f, rng)
	if err != nil {
		g.violation(pOutcome, "", "the schedule could not strike: %v", err)
	}
	if i >= 0 {
		g.s.hist.NoteKey(key, "strike: node %d %s while %q is held", i, f, key)
		g.tally.Add("strike", f.String())
	}
}

// extendPair runs two Extends with random TTLs on l at once, and
// describes them.
func (g *generator) extendPair(rng *rand.Rand, gc *genClient, l *Lock, x *chaos.Hold) string {
	r1, r2 := rand.New(rand.NewPCG(rng.Uint64(), 1)), rand.New(rand.NewPCG(rng.Uint64(), 2))
	stagger := time.Duration(rng.Int64N(int64(time.Millisecond)))
	var wg sync.WaitGroup
	var d1, d2 string
	wg.Add(2)
	go func() { defer wg.Done(); d1 = g.extend(r1, gc, l, x, "Extend (pair)") }()
	go func() {
		defer wg.Done()
		time.Sleep(stagger) // who goes first
		d2 = g.extend(r2, gc, l, x, "Extend (pair)")
	}()
	wg.Wait()
	return d1 + " and, concurrently, " + d2
}

func (g *generator) unlock(rng *rand.Rand, holder string, gc *genClient, l *Lock, health chaos.Health, kind string) {
	ctx, cancel := callCtx(rng) // Unlock sends its deletes even with ctx ended
	afterClose := gc.closed.Load()
	handOffs := gc.cfg.test.handOffs.Load() + gc.cfg.test.remoteHandOffs.Load()
	before := g.settledBefore(holder, l.Token())
	start := time.Now()
	stop := g.stalled(kind, genUnlockLimit+genStall)
	err := l.Unlock(ctx)
	took := time.Since(start)
	stop()
	cancel()
	o := g.count(kind, err, afterClose, unlockOutcomes, closedLockOps)
	g.within(l.Key(), kind, took, genUnlockLimit, err)
	if gc.cfg.test.handOffs.Load()+gc.cfg.test.remoteHandOffs.Load() != handOffs {
		o += ", a hand-off by its Client meanwhile"
	}
	g.s.hist.NoteKey(l.Key(), "%s %s %.8s: %s (%v)", holder, kind, l.Token(), o, err)
	if !errors.Is(err, ErrClosed) {
		g.checkRelease(l.Key(), l.Token(), health, holder, start, before)
	}
}

// The kinds of Do's fn.
const (
	fnNil   = "Do (fn ok)"
	fnErr   = "Do (fn error)"
	fnPanic = "Do (fn panics)"
	fnLong  = "Do (fn outlives the TTL)"
)

func (g *generator) doSession(rng *rand.Rand, name string, gc *genClient, key string) {
	ttl := g.ttl(rng)
	var kind string
	var length time.Duration // fn's work
	switch r := rng.IntN(20); {
	case r < 8:
		kind = fnNil
	case r < 13:
		kind = fnErr
	case r < 16:
		kind = fnPanic
	default:
		kind = fnLong
		ttl = logUniform(rng, genMinTTL, 2*genMinTTL)
		length = time.Duration(float64(ttl) * (1.2 + 1.3*rng.Float64()))
	}
	// fn's context is a child of ctx: leave a long fn its time after the
	// wait.
	var extra time.Duration
	if length > 0 {
		extra = length + scaled(300*time.Millisecond)
	}
	ctx, cancel := waitCtx(rng, extra)
	defer cancel()
	deadline, _ := ctx.Deadline()
	work := g.work(rng)
	fenced := kind == fnNil && rng.IntN(3) == 0 // fn asks for its lock's fence
	afterClose := gc.closed.Load()
	holder := name + "/" + gc.name + "/do"
	var ran, returned time.Time
	called := time.Now()
	stop := g.stalled(kind+" wait", max(time.Until(deadline), 0)+genWaitLimit+genStall)
	fn := func(fctx context.Context) error {
		ran = time.Now()
		stop()
		defer func() { returned = time.Now() }()
		// The window ends with fn's context, or when fn returns; a context
		// already done means the lock is not to be trusted: no window.
		var x *chaos.Hold
		if fctx.Err() == nil {
			// The window ends when fn's context ends, or at the lock's
			// Until if that came first: the context learns of the end a
			// goroutine's wake-up later, tens of milliseconds under -race
			// on two cores, as a real fn would.
			l := LockFromContext(fctx)
			x = g.s.hist.Acquired(holder, key, "do", ran.Add(time.Hour))
			end := func() { x.ReleasingBy(l.Until()) }
			stop := context.AfterFunc(fctx, end)
			defer func() {
				end()
				stop()
			}()
			if fenced {
				g.fence(fctx, "Fence (in Do)", genFencer{name: holder + "/" + l.Token()[:8], gc: gc, l: l, acquiring: called, acquired: ran})
			}
			x.SectionWhile(fctx.Done(), work)
		}
		switch kind {
		case fnErr:
			return errFn
		case fnPanic:
			panic(errPanic)
		case fnLong:
			tick := time.NewTicker(max(ttl/8, time.Millisecond))
			defer tick.Stop()
			for x != nil && time.Since(ran) < length {
				select {
				case <-fctx.Done():
					return nil
				case <-tick.C:
				}
				x.SectionWhile(fctx.Done(), work/4)
			}
		}
		return nil
	}
	var err error
	panicked := false
	func() {
		defer func() {
			if r := recover(); r != nil {
				if r != errPanic { //nolint:errorlint // the value fn panicked with, not an error chain
					panic(r)
				}
				panicked = true
			}
		}()
		err = gc.Do(ctx, key, ttl, fn)
	}()
	done := time.Now()
	stop()

	g.ops.Add(1)
	o := outcome(err)
	if panicked {
		o = "panicked"
	}
	g.tally.Add(kind, o)
	allowed := []string{"not obtained", "not obtained (ctx)", "closed", "lock lost"}
	switch kind {
	case fnNil, fnLong:
		allowed = append(allowed, "ok")
	case fnErr:
		allowed = append(allowed, "fn error")
	case fnPanic:
		allowed = append(allowed, "panicked")
	}
	if afterClose {
		allowed = closedOutcomes
	}
	if !slices.Contains(allowed, o) {
		g.violation(pOutcome, key, "%s: outcome %q, want one of %v: %v", kind, o, allowed, err)
	}
	if ran.IsZero() != (o == "not obtained" || o == "not obtained (ctx)" || o == "closed") {
		g.violation(pOutcome, key, "%s: %q but fn ran: %v", kind, o, !ran.IsZero())
	}
	if ran.IsZero() {
		if !deadline.IsZero() {
			g.within(key, kind+" without the lock", done.Sub(deadline), genWaitLimit, err)
		}
		return
	}
	if !deadline.IsZero() {
		g.within(key, kind+" wait", ran.Sub(deadline), genWaitLimit, err)
	}
	g.within(key, kind+" after fn", done.Sub(returned), genAfterFn, err)
}

// replace closes a Client with calls in flight, in the background, and
// puts a new one in its slot.
func (g *generator) replace(rng *rand.Rand) {
	i := rng.IntN(len(g.slots))
	sl := g.slots[i]
	next := g.newClient(rng.IntN(len(g.profiles)))
	sl.mu.Lock()
	old := sl.c
	sl.c = next
	sl.mu.Unlock()
	// Now and then a lock of the closing Client outlives its Close (Close
	// releases nothing): its validity ends on its own, and a Lock of its
	// key after Close must not wait for that.
	var kept string
	if rng.IntN(3) == 0 {
		key := g.keys[genShared+i]
		ctx, cancel := context.WithTimeout(bg, chaosNodeD)
		l, err := old.Lock(ctx, key, genOpLimit+scaled(200*time.Millisecond))
		cancel()
		g.count("Lock", err, false, acquireOutcomes, nil)
		if err == nil {
			g.s.hist.Acquired(old.name+"/kept", key, l.Token(), l.Until())
			g.s.hist.NoteKey(key, "%s keeps %.8s across its Close", old.name, l.Token())
			kept = key
		}
	}
	g.s.hist.Note("closing Client %s, replaced by %s", old.name, next.name)
	seed := rng.Uint64()
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		g.close(old)
		g.afterClose(rand.New(rand.NewPCG(seed, 3)), old, kept)
	}()
}

// close closes gc, checking property 4 for Close.
func (g *generator) close(gc *genClient) {
	start := time.Now()
	err := gc.Close()
	took := time.Since(start)
	gc.closed.Store(true)
	g.handOffs.Add(gc.cfg.test.handOffs.Load())
	g.remote.Add(gc.cfg.test.remoteHandOffs.Load())
	g.handed.Add(gc.cfg.test.handedLocks.Load())
	g.count("Close", err, false, []string{"ok"}, nil)
	g.within("", "Close", took, genCloseLimit, err)
}

// afterClose makes calls on a closed Client: each must return ErrClosed at
// once, also a Lock of a key another worker still holds through it.
func (g *generator) afterClose(rng *rand.Rand, gc *genClient, kept string) {
	for _, key := range g.keys {
		// Time enough to wait behind a holder of the closed Client, which
		// a Lock after Close must not do.
		ctx, cancel := context.WithTimeout(bg, 2*genMaxTTL)
		start := time.Now()
		var err error
		op := rng.IntN(3)
		if key == kept {
			op = 1
		}
		switch op {
		case 0:
			_, err = gc.TryLock(ctx, key, g.ttl(rng))
		case 1:
			_, err = gc.Lock(ctx, key, g.ttl(rng))
		case 2:
			err = gc.Do(ctx, key, g.ttl(rng), func(context.Context) error {
				g.violation(pClosed, key, "Do on a closed Client ran fn")
				return nil
			})
		}
		took := time.Since(start)
		cancel()
		g.count("call after Close", err, true, nil, closedOutcomes)
		g.within(key, "call after Close", took, genOpLimit, err)
	}
}
