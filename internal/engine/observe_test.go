package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// A recorder keeps every event an Observer receives.
type recorder struct {
	mu          sync.Mutex
	starts      []string // op + " " + key
	parents     []string // the op of the Start whose ctx each Start was given, "" for none
	rounds      []RoundEvent
	replies     []NodeReplyEvent
	states      []NodeStateEvent
	acquires    []AcquireEvent
	extends     []ExtendEvent
	releases    []ReleaseEvent
	dos         []DoEvent
	quarantines []QuarantineEvent
	degraded    []NoticesDegradedEvent
	notices     []NoticeEvent
}

type spanKey struct{}

func record[E any](r *recorder, to *[]E) func(E) {
	return func(e E) {
		r.mu.Lock()
		defer r.mu.Unlock()
		*to = append(*to, e)
	}
}

func (r *recorder) observer() Observer {
	return Observer{
		Start: func(ctx context.Context, op, key string) context.Context {
			r.mu.Lock()
			r.starts = append(r.starts, op+" "+key)
			parent, _ := ctx.Value(spanKey{}).(string)
			r.parents = append(r.parents, parent)
			r.mu.Unlock()
			return context.WithValue(ctx, spanKey{}, op)
		},
		Round:           record(r, &r.rounds),
		NodeReply:       record(r, &r.replies),
		NodeState:       record(r, &r.states),
		Acquire:         record(r, &r.acquires),
		Extend:          record(r, &r.extends),
		Release:         record(r, &r.releases),
		DoEnd:           record(r, &r.dos),
		Quarantine:      record(r, &r.quarantines),
		NoticesDegraded: record(r, &r.degraded),
		Notice:          record(r, &r.notices),
	}
}

// snapshot returns a copy of what was recorded in *from, under the lock.
func snapshot[E any](r *recorder, from *[]E) []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]E(nil), *from...)
}

// A logBuffer is a slog JSON handler's output, parsed line by line.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (b *logBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records returns the log records whose msg is msg.
func (b *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.text()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestObserverAndLogUnderAPausedMaster: with one master of five paused,
// every round still wins; the paused master's requests time out. It must
// be reported failing once (a transition, not every call), warned about
// once in the log, and reported answering again once it is resumed. Each
// round's event carries every master's part, and no token or key reaches
// the log.
func TestObserverAndLogUnderAPausedMaster(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	var logs logBuffer
	nodeTimeout := scaled(50 * time.Millisecond)
	c := r.client(WithObserver(rec.observer()), WithLogger(logs.logger()), WithNodeTimeout(nodeTimeout))
	const key = "invoice:42"
	r.servers[2].Pause()
	var tokens []string
	for range 5 {
		l, err := c.TryLock(bg, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token())
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	settle(c) // the paused master's requests have timed out
	r.servers[2].Resume()
	l, err := c.Lock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, l.Token())
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)

	states := snapshot(&rec, &rec.states)
	if len(states) != 2 || states[0].Node != 2 || states[0].Healthy || states[0].Outcome != NodeTimeout ||
		!states[1].Healthy || states[1].Node != 2 {
		t.Fatalf("NodeState events = %+v; want master 2 failing with a timeout, then healthy again, once each", states)
	}
	if !errors.Is(states[0].Err, ErrNodeTimeout) {
		t.Fatalf("failing master's error = %v, want a timeout", states[0].Err)
	}

	rounds := snapshot(&rec, &rec.rounds)
	if len(rounds) != 12 {
		t.Fatalf("%d rounds observed, want 12 (6 locks, 6 unlocks)", len(rounds))
	}
	for i, e := range rounds[:10] {
		wantOp := []string{"lock", "unlock"}[i%2]
		if e.Op != wantOp || e.Key != key || e.Quorum != 3 || e.Votes < 3 || !e.Won() || len(e.Nodes) != 5 {
			t.Fatalf("round %d = %+v; want a won %s of %q with 5 nodes", i, e, wantOp, key)
		}
		if got := e.Ctx.Value(spanKey{}); got != map[string]string{"lock": "try_lock", "unlock": "unlock"}[e.Op] {
			t.Fatalf("round %d's ctx carries %v, not its call's Start", i, got)
		}
		yes := 0
		for j, n := range e.Nodes {
			if n.Node != j || n.Addr != c.nodes[j].addr {
				t.Fatalf("round %d node %d = %+v: wrong index or address", i, j, n)
			}
			switch {
			case j == 2 && n.Outcome != NodePending && n.Outcome != NodeTimeout:
				t.Fatalf("round %d: paused master's outcome %v, want pending or timeout", i, n.Outcome)
			case j != 2 && n.Outcome == NodeYes:
				yes++
				if n.Latency <= 0 || n.Latency > e.Elapsed {
					t.Fatalf("round %d node %d: latency %v outside the round's %v", i, j, n.Latency, e.Elapsed)
				}
			}
		}
		if yes != e.Votes {
			t.Fatalf("round %d: %d nodes said yes, Votes = %d", i, yes, e.Votes)
		}
	}

	timeouts := 0
	for _, e := range snapshot(&rec, &rec.replies) {
		if e.Node == 2 && e.Outcome == NodeTimeout {
			timeouts++
		}
		// A healthy master may refuse when the previous Unlock's delete
		// is still on its way to it; it never fails.
		if e.Node != 2 && e.Outcome != NodeYes && e.Outcome != NodeRefused {
			t.Fatalf("healthy master's reply %+v, want an answer", e)
		}
	}
	if timeouts != 10 {
		t.Fatalf("%d timed-out replies from the paused master, want 10 (every request while paused)", timeouts)
	}

	acquires := snapshot(&rec, &rec.acquires)
	if len(acquires) != 6 || acquires[0].Op != "try_lock" || acquires[5].Op != "lock" {
		t.Fatalf("Acquire events = %+v, want 5 TryLock and 1 Lock", acquires)
	}
	for _, e := range acquires {
		if e.Outcome != AcquireObtained || e.Err != nil || e.Wait <= 0 || e.Key != key {
			t.Fatalf("Acquire event %+v, want obtained", e)
		}
	}
	for _, e := range snapshot(&rec, &rec.releases) {
		if e.Err != nil || e.HandedOff || e.Held <= 0 {
			t.Fatalf("Release event %+v, want a plain release with its hold time", e)
		}
	}

	if w := logs.records(t, "redlock: master failing"); len(w) != 1 || w[0]["level"] != "WARN" || w[0]["node"] != 2.0 ||
		w[0]["addr"] != c.nodes[2].addr || w[0]["outcome"] != "timeout" {
		t.Fatalf("warnings for the paused master: %v; want one WARN naming master 2 and a timeout", w)
	}
	if n := len(logs.records(t, "redlock: master answering again")); n != 1 {
		t.Fatalf("%d 'answering again' records, want 1", n)
	}
	debug := logs.records(t, "redlock: round")
	if len(debug) != 12 {
		t.Fatalf("%d round records at Debug, want 12", len(debug))
	}
	d := debug[0]
	yes := 0.0
	for i := range 5 {
		n, ok := d["node"+strconv.Itoa(i)].(map[string]any)
		if !ok || n["addr"] != c.nodes[i].addr || n["outcome"] == nil || n["latency"] == nil {
			t.Fatalf("first round record %v: node %d's outcome missing", d, i)
		}
		if n["outcome"] == "yes" {
			yes++
		}
	}
	if d["op"] != "lock" || d["key_hash"] != KeyHash(key) || d["votes"] != yes || d["quorum"] != 3.0 {
		t.Fatalf("first round record %v; want op, key_hash, votes (as many as the nodes' yes) and quorum", d)
	}
	text := logs.text()
	for _, tok := range tokens {
		if strings.Contains(text, tok) {
			t.Fatalf("the log holds a lock token (%s)", tok)
		}
	}
	if strings.Contains(text, key) {
		t.Fatal("the log holds the key although WithKeyAttributes was not given")
	}
}

// TestObserverUnderContention: another Client's TryLock on a held key is
// AcquireContended, every master refusing; its Lock that times out waiting is
// AcquireContended too, and matches the ctx's error; a release to a local waiter
// is a hand-off, to another Client's waiter a remote one.
func TestObserverUnderContention(t *testing.T) {
	r := startReal(t, 5)
	var recA, recB recorder
	a := r.client(WithObserver(recA.observer()))
	b := r.client(WithObserver(recB.observer()))
	const key = "k"
	watching(t, a, key) // A hears B's want
	la, err := a.Lock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := b.TryLock(bg, key, 10*time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a held key = %v", err)
	}
	settle(b)
	acq := snapshot(&recB, &recB.acquires)
	if len(acq) != 1 || acq[0].Outcome != AcquireContended || acq[0].Op != "try_lock" || !errors.Is(acq[0].Err, ErrNotObtained) {
		t.Fatalf("B's Acquire events = %+v, want one contended TryLock", acq)
	}
	rounds := snapshot(&recB, &recB.rounds)
	if len(rounds) != 1 || rounds[0].Votes != 0 || rounds[0].Won() {
		t.Fatalf("B's rounds = %+v, want one lost lock round", rounds)
	}
	refused := 0
	for _, n := range rounds[0].Nodes {
		if n.Outcome == NodeRefused {
			refused++
		}
	}
	if refused < 3 {
		t.Fatalf("B's round: %d refusals before its decision, want a majority: %+v", refused, rounds[0].Nodes)
	}

	ctx, cancel := context.WithTimeout(bg, scaled(300*time.Millisecond))
	_, err = b.Lock(ctx, key, 10*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a held key = %v, want the ctx's end", err)
	}
	acq = snapshot(&recB, &recB.acquires)
	if e := acq[len(acq)-1]; e.Op != "lock" || e.Outcome != AcquireContended || e.Wait < scaled(300*time.Millisecond)-time.Millisecond {
		t.Fatalf("B's Lock event %+v: want contended after its wait", e)
	}

	// B's waiter gets the lock straight from A's Unlock: a remote hand-off.
	// A must know the new waiter's want, not the one the timed-out Lock
	// withdrew: under -race that withdrawal can still be on its way, and an
	// Unlock between the two finds no want (a CI rehearsal saw it).
	withdrawn := wantsOf(a, key)
	res := tryLockAsync(b, key, 10*time.Second)
	within(t, scaled(5*time.Second), "the new want", func() bool {
		for {
			for _, w := range wantsOf(a, key) {
				if !slices.Contains(withdrawn, w) {
					return true
				}
			}
			time.Sleep(time.Millisecond) // the waker has no signal for tests
		}
	})
	if err := la.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	rel := snapshot(&recA, &recA.releases)
	if len(rel) != 1 || !rel[0].HandedOff || !rel[0].Remote || rel[0].Err != nil || rel[0].Held <= 0 {
		t.Fatalf("A's Release events = %+v, want one hand-off to another Client", rel)
	}
	if rel[0].Ctx.Value(spanKey{}) != "unlock" {
		t.Fatal("the Release event's ctx is not the one Start returned")
	}
	handed := 0
	for _, e := range snapshot(&recB, &recB.notices) {
		if e.Kind == "handed" && e.Own && e.Key == key {
			handed++
		}
	}
	if handed < 3 {
		t.Fatalf("B observed %d handed notices, want a majority's", handed)
	}

	// A local waiter of B gets the lock straight from B's Unlock.
	waiter := lockInBackground(bg, b, key)
	queued(t, b, key, 1)
	if err := got.l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, waiter, "B's local waiter")
	rel = snapshot(&recB, &recB.releases)
	if len(rel) != 1 || !rel[0].HandedOff || rel[0].Remote {
		t.Fatalf("B's Release events = %+v, want one local hand-off", rel)
	}
}

// TestQueuedWaitersNameTheOutage: with a majority of masters paused, the
// Lock calls queued behind the Client's first waiter never make an attempt
// of their own, yet each of their errors must say what their queue last
// saw, a majority unreachable with every node's detail, not only that
// their ctx ended ("contended" is only for a key held by another token).
func TestQueuedWaitersNameTheOutage(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	c := r.client(WithObserver(rec.observer()), WithNodeTimeout(scaled(30*time.Millisecond)))
	for i := range 3 {
		r.servers[i].Pause()
	}
	ctx, cancel := context.WithTimeout(bg, scaled(400*time.Millisecond))
	defer cancel()
	const waiters = 6
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := c.Lock(ctx, "k", 10*time.Second)
			errs <- err
		}()
	}
	for range waiters {
		err := <-errs
		var qe *QuorumError
		if !errors.As(err, &qe) {
			t.Fatalf("Lock = %v: no *QuorumError to say why", err)
		}
		if !errors.Is(err, ErrNodeTimeout) || errors.Is(err, ErrNodeRefused) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v: want the masters' timeouts and the ctx's end, no refusal", err)
		}
		if qe.cause() != causeUnreachable {
			t.Fatalf("Lock = %v: its cause reads %v, want a majority unreachable", err, qe.cause())
		}
	}
	wantOutcomes(t, &rec, AcquireMajorityUnreachable)
	for i := range 3 {
		r.servers[i].Resume()
	}
}

// TestObserverReportsALockLostInDo: the keys vanish under Do; the refused
// Extend and the lost lock are events, and warnings in the log.
func TestObserverReportsALockLostInDo(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	var logs logBuffer
	c := r.client(WithObserver(rec.observer()), WithLogger(logs.logger()), WithKeyAttributes())
	ttl := scaled(300 * time.Millisecond)
	err := c.Do(bg, "job:7", ttl, func(ctx context.Context) error {
		for _, a := range r.admin {
			a.Del(bg, "job:7")
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
	dos := snapshot(&rec, &rec.dos)
	if len(dos) != 1 || !errors.Is(dos[0].Lost, ErrLockLost) || dos[0].Held <= 0 || dos[0].Ctx.Value(spanKey{}) == nil {
		t.Fatalf("DoEnd events = %+v, want one with the loss", dos)
	}
	refused := false
	for _, e := range snapshot(&rec, &rec.extends) {
		refused = refused || errors.Is(e.Err, ErrNotHeld)
	}
	if !refused {
		t.Fatalf("no refused Extend among %+v", snapshot(&rec, &rec.extends))
	}
	lost := logs.records(t, "redlock: lock lost in Do")
	if len(lost) != 1 || lost[0]["level"] != "WARN" || lost[0]["key"] != "job:7" {
		t.Fatalf("lost-lock records %v, want one WARN with the key (WithKeyAttributes)", lost)
	}
	ext := logs.records(t, "redlock: extend")
	if len(ext) == 0 || ext[len(ext)-1]["level"] != "WARN" || ext[len(ext)-1]["refused"] != true {
		t.Fatalf("Extend records %v, want the refusal at WARN", ext)
	}
	starts := snapshot(&rec, &rec.starts)
	if len(starts) < 3 || starts[0] != "do job:7" || starts[1] != "lock job:7" {
		t.Fatalf("Start calls %q, want Do, then its Lock, then Extends", starts)
	}
	// Do's Lock, its watchdog's Extends and its Unlock are children of its
	// span: a tracer shows them under Do, not as orphans.
	parents := snapshot(&rec, &rec.parents)
	for i, op := range starts[1:] {
		if parents[i+1] != "do" {
			t.Fatalf("Start %q was given a ctx under %q, want under Do (starts %q, parents %q)", op, parents[i+1], starts, parents)
		}
	}
}

// TestLogNamesNoKeyInErrors: errors' texts name the key; without
// WithKeyAttributes the logger records their kind instead.
func TestLogNamesNoKeyInErrors(t *testing.T) {
	r := startReal(t, 5)
	var logs logBuffer
	a := r.client()
	// A generous node deadline: the Fence below needs its lock on all five.
	b := r.client(WithLogger(logs.logger()), WithNodeTimeout(scaled(2*time.Second)))
	const key = "invoice:SECRET-42"
	l, err := a.TryLock(bg, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(bg, key, 10*time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock on a held key = %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(100*time.Millisecond))
	defer cancel()
	if err := b.Do(ctx, key, time.Second, func(context.Context) error { return nil }); err == nil {
		t.Fatal("Do on a held key ran")
	}
	_ = l.Unlock(bg)
	settle(a) // Unlock returns at a majority: the last delete may be on its way
	// A master's own error (a fence counter another hand left at -5) goes
	// into the log as it is: it must not name the key either.
	if err := r.admin[0].Set(bg, script.FenceKey(key, false), "-5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	fl := mustLock(t, b, key, 10*time.Second)
	// Master 0's fence request must be sent: a round that four others
	// decide first drops it unsent, and then no master reads the counter.
	if n := r.count(key, fl.Token()); n != 5 {
		t.Fatalf("the lock holds %d masters, want 5", n)
	}
	sentTogether(script.Fence, r.clients, scaled(5*time.Second))
	if _, err := fl.Fence(bg); err != nil {
		t.Fatalf("Fence with one bad counter of five = %v", err)
	}
	_ = fl.Unlock(bg)
	settle(b) // master 0's answer may come after the round: it is logged as it fails
	if strings.Contains(logs.text(), "SECRET") {
		t.Fatalf("the log names the key:\n%s", logs.text())
	}
	if !strings.Contains(logs.text(), "fence counter") {
		t.Fatalf("the log does not report the bad fence counter:\n%s", logs.text())
	}
	rec := logs.records(t, "redlock: try_lock")
	if len(rec) != 2 || rec[0]["err"] != "not obtained; node refused" { // the refused one, then the Fence's lock
		t.Fatalf("TryLock records %v, want the error's kind", rec)
	}
}

// TestObserverReportsQuarantine: a master that lost its data says yes, is
// not counted, and is reported once as quarantined.
func TestObserverReportsQuarantine(t *testing.T) {
	m := newMinis(t, 5, nil)
	restartScene(t, m)
	var rec recorder
	b := m.client(WithObserver(rec.observer()))
	for range 2 {
		if _, err := b.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
			t.Fatalf("TryLock = %v, want a quarantined node", err)
		}
		settle(b)
	}
	q := snapshot(&rec, &rec.quarantines)
	if len(q) != 1 || q[0].Node != 0 || q[0].Op != "lock" {
		t.Fatalf("Quarantine events = %+v, want master 0 once", q)
	}
	found := false
	for _, n := range snapshot(&rec, &rec.rounds)[0].Nodes {
		found = found || (n.Node == 0 && n.Outcome == NodeQuarantined)
	}
	if !found {
		t.Fatal("the round event does not show master 0 quarantined")
	}
}

// TestObserverReportsASecondQuarantine: a master quarantined, counted again
// once its memory is old enough, and then quarantined after another restart
// is reported each time it stops being counted.
func TestObserverReportsASecondQuarantine(t *testing.T) {
	m := newMinis(t, 5, nil)
	var rec recorder
	b := m.client(WithObserver(rec.observer()))
	before := mustLock(t, b, "before", time.Minute)
	settle(b)
	restartScene(t, m)
	if _, err := b.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock = %v, want a quarantined node", err)
	}
	settle(b)
	// Still young: locks without it, and their releases, which it answers
	// (the guard holds back grants, not releases), report nothing new.
	for i := range 3 {
		l := mustLock(t, b, fmt.Sprint("young", i), time.Minute)
		_ = l.Unlock(bg)
		settle(b)
	}
	// Nor is a release's yes, even in its round's majority: master 0 says
	// yes to the release of a lock taken before the restart, its key set
	// there again by hand, in a round left to masters 0-2 (3 and 4 held
	// up). A TryLock of "k" then needs master 0's answer to decide (A
	// holds masters 1 and 2), so its guard speaks every time.
	m.take(0, "before", before.Token(), time.Minute)
	_, unblock3 := m.block(3)
	_, unblock4 := m.block(4)
	if err := before.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	unblock3()
	unblock4()
	settle(b)
	if _, err := b.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock = %v, want a quarantined node", err)
	}
	settle(b)
	if q := snapshot(&rec, &rec.quarantines); len(q) != 1 {
		t.Fatalf("Quarantine events while master 0 stays young = %+v, want the first one only", q)
	}
	ageMemory(t, m.clients[:1], establishedAge) // its memory is old enough again
	// Until a round counts master 0's yes (a round decides at a majority,
	// and master 0 may answer after it).
	for i := 0; ; i++ {
		l := mustLock(t, b, fmt.Sprint("other", i), time.Minute)
		_ = l.Unlock(bg)
		settle(b)
		rounds := snapshot(&rec, &rec.rounds)
		counted := false
		for _, r := range rounds[len(rounds)-2:] {
			counted = counted || (r.Op == "lock" && r.Nodes[0].Outcome == NodeYes)
		}
		if counted {
			break
		}
		if i == 50 {
			t.Fatal("master 0's yes was never counted once its memory was old enough")
		}
	}
	m.servers[0].FlushAll() // and it restarts empty again
	if _, err := b.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock after the second restart = %v, want a quarantined node", err)
	}
	settle(b)
	if q := snapshot(&rec, &rec.quarantines); len(q) != 2 {
		t.Fatalf("Quarantine events = %+v, want master 0 twice", q)
	}
}

// TestAMasterAtMaxmemoryIsReportedOnce: a master that refuses every write
// (maxmemory, noeviction) still answers releases, extensions and fences
// with "not ours"; that is no recovery, and the master is reported failing
// once, not on every lock.
func TestAMasterAtMaxmemoryIsReportedOnce(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	var logs logBuffer
	c := r.client(WithObserver(rec.observer()), WithLogger(logs.logger()))
	if err := r.admin[0].ConfigSet(bg, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.admin[0].ConfigSet(bg, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer r.admin[0].ConfigSet(bg, "maxmemory", "0")
	for i := range 5 {
		l := mustLock(t, c, fmt.Sprint("k", i), 10*time.Second)
		// Extend, Fence and Do's watchdog find no key there ("not ours"):
		// no recovery either.
		if err := l.Extend(bg, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Fence(bg); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
		settle(c)
	}
	// Until Do's watchdog has extended the lock and master 0 answered it.
	extendedOn0 := func() bool {
		for _, e := range snapshot(&rec, &rec.replies) {
			if e.Op == "extend" && e.Key == "do" && e.Node == 0 {
				return true
			}
		}
		return false
	}
	if err := c.Do(bg, "do", scaled(300*time.Millisecond), func(ctx context.Context) error {
		for !extendedOn0() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("Do's extension never reached master 0: %w", context.Cause(ctx))
			case <-time.After(time.Millisecond): // the recorder sends no signal
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	settle(c)
	var changes []NodeStateEvent
	for _, e := range snapshot(&rec, &rec.states) {
		if e.Node == 0 {
			changes = append(changes, e)
		}
	}
	if len(changes) != 1 || changes[0].Healthy {
		t.Fatalf("master 0's state changes = %+v, want one: failing", changes)
	}
	if n := len(logs.records(t, "redlock: master failing")); n != 1 {
		t.Fatalf("%d Warn lines for master 0, want 1:\n%s", n, logs.text())
	}
}

// TestNoTokenInAMangledResumesError: a token copied with a newline or in
// upper case is refused, and the refusal does not quote it: errors end up
// in logs and spans, and a token is a capability.
func TestNoTokenInAMangledResumesError(t *testing.T) {
	r := startReal(t, 3)
	var rec recorder
	a := r.client()
	d := r.client(WithObserver(rec.observer()))
	l := mustLock(t, a, "k", 10*time.Second)
	defer func() { _ = l.Unlock(bg) }()
	for _, bad := range []string{l.Token() + "\n", strings.ToUpper(l.Token()), " " + l.Token()} {
		_, err := d.Resume(bg, "k", bad, 10*time.Second)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Resume(%q) = %v, want ErrInvalidArgument", bad, err)
		}
		if strings.Contains(strings.ToLower(err.Error()), l.Token()) {
			t.Fatalf("Resume's error quotes the token: %v", err)
		}
	}
	for _, e := range snapshot(&rec, &rec.acquires) {
		if e.Err != nil && strings.Contains(strings.ToLower(e.Err.Error()), l.Token()) {
			t.Fatalf("an Acquire event carries the token: %v", e.Err)
		}
	}
}

// TestObserverReportsRefusedNotices: an ACL user without channel rights
// makes every master refuse the notices; each is reported once.
func TestObserverReportsRefusedNotices(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	c, err := New(r.aclClients("app", "~*", "+@all", "resetchannels"), WithObserver(rec.observer()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Announced acquisitions and releases: c watches the key, as a Client
	// with waiters does (one that watches nothing publishes nothing for a
	// key nobody marked).
	defer c.wk.Watch("k").Close()
	for range 3 {
		l := mustLock(t, c, "k", 10*time.Second)
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	settle(c)
	seen := map[int]int{}
	for _, e := range snapshot(&rec, &rec.degraded) {
		seen[e.Node]++
	}
	for i := range 5 {
		if seen[i] > 1 {
			t.Fatalf("master %d reported refusing notices %d times, want once", i, seen[i])
		}
	}
	if len(seen) < 3 {
		t.Fatalf("refused notices reported for masters %v, want at least the majority that answered", seen)
	}
}

// TestZeroObserverIsNoObserver: WithObserver(Observer{}) installs nothing.
func TestZeroObserverIsNoObserver(t *testing.T) {
	m := newMinis(t, 3, nil)
	c := m.client(WithObserver(Observer{}))
	if c.cfg.obs != nil {
		t.Fatal("a zero Observer was installed")
	}
	if _, err := New(m.clients, WithLogger(nil)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WithLogger(nil) = %v, want ErrInvalidArgument", err)
	}
}

// TestContentionBesideAFailingMasterIsContended: the key is held by another
// token on three masters of five, and a fourth is at maxmemory (every
// acquire fails there with OOM). A TryLock loses to the holder, whatever
// order the answers arrive in; the failing master alone could not have put
// a majority out of reach, so every loss must read contended, never
// majority unreachable, in the error and in the Acquire event.
func TestContentionBesideAFailingMasterIsContended(t *testing.T) {
	r := startReal(t, 5)
	holder := r.client()
	if _, err := holder.TryLock(bg, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{3, 4} {
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	r.setMaxmemory(t, "1", 3)
	t.Cleanup(func() { r.setMaxmemory(t, "0", 3) })
	var rec recorder
	c := r.client(WithObserver(rec.observer()))
	const tries = 60
	oomSeen := 0
	for range tries {
		_, err := c.TryLock(bg, "k", time.Minute)
		var qe *QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock = %v, want a *QuorumError for ErrNotObtained", err)
		}
		for _, ne := range qe.Nodes {
			if ne.Node == 3 && !errors.Is(ne.Err, ErrNodeRefused) {
				oomSeen++
			}
		}
		if qe.cause() != causeContended {
			t.Fatalf("TryLock = %v: its cause reads %v, want contended", err, qe.cause())
		}
	}
	if oomSeen == 0 {
		t.Fatalf("the master at maxmemory failed in none of %d rounds: the test proves nothing", tries)
	}
	wantOutcomes(t, &rec, AcquireContended)
	t.Logf("the OOM master's failure was among the deciding answers in %d of %d rounds", oomSeen, tries)
}

// TestHungMasterIsReportedWhenTheCallerLeaves: one master of five hangs.
// The caller's TryLock wins on the other four and its ctx ends at once, as
// a request handler's would. The hung master's request is still
// outstanding; when the driver gives up on it (its read timeout, well past
// the node deadline), that is the master's timeout, not the caller's
// cancellation: NodeReply must say timeout and NodeState must report the
// master failing, or a service whose callers never wait would never hear
// of a hung master.
func TestHungMasterIsReportedWhenTheCallerLeaves(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.StartN(t, 5)
	var nodes []redis.UniversalClient
	for _, s := range servers {
		nodes = append(nodes, s.Client(&redis.Options{ReadTimeout: scaled(200 * time.Millisecond), MaxRetries: -1}))
	}
	ageMemory(t, nodes, establishedAge)
	var rec recorder
	c, err := New(nodes, WithObserver(rec.observer()), WithNodeTimeout(scaled(30*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		servers[4].Resume()
		_ = c.Close()
	})
	servers[4].Pause()
	ctx, cancel := context.WithCancel(bg)
	if _, err := c.TryLock(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	cancel()
	for bound := time.Now().Add(scaled(5 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
		var failing bool
		for _, e := range snapshot(&rec, &rec.states) {
			failing = failing || (e.Node == 4 && !e.Healthy && e.Outcome == NodeTimeout)
		}
		if failing {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("the hung master was never reported failing: states %+v, its replies %+v", snapshot(&rec, &rec.states), repliesOf(&rec, 4))
		}
	}
	for _, e := range repliesOf(&rec, 4) {
		if e.Outcome != NodeTimeout || !errors.Is(e.Err, ErrNodeTimeout) {
			t.Fatalf("the hung master's reply %+v, want a timeout", e)
		}
	}
}

func repliesOf(r *recorder, node int) []NodeReplyEvent {
	var out []NodeReplyEvent
	for _, e := range snapshot(r, &r.replies) {
		if e.Node == node {
			out = append(out, e)
		}
	}
	return out
}

// TestQuarantineIsNotContention: two masters of five lost their data (the
// restart guard quarantines their yes) and a third is at maxmemory. Nobody
// else holds any key, so a lost TryLock must not read contended: no master
// held another token. The quarantined masters cannot vote, so the
// majority is out of reach.
func TestQuarantineIsNotContention(t *testing.T) {
	r := startReal(t, 5)
	ageMemory(t, []redis.UniversalClient{r.clients[0], r.clients[1]}, 0)
	r.setMaxmemory(t, "1", 4)
	t.Cleanup(func() { r.setMaxmemory(t, "0", 4) })
	var rec recorder
	c := r.client(WithObserver(rec.observer()))
	for i := range 5 {
		key := fmt.Sprintf("k%d", i) // a fresh key each time: nothing left from the last
		_, err := c.TryLock(bg, key, time.Minute)
		var qe *QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, ErrNodeQuarantined) {
			t.Fatalf("TryLock = %v, want a *QuorumError with quarantined masters", err)
		}
		if qe.cause() != causeUnreachable {
			t.Fatalf("TryLock = %v: its cause reads %v, want a majority unreachable", err, qe.cause())
		}
	}
	wantOutcomes(t, &rec, AcquireMajorityUnreachable)
}

// TestExtendAtTheValidityEndBlamesNoMaster: an Extend made just before its
// lock's validity ends waits for the masters only until then, and healthy
// masters cannot answer in the 200 µs left. The round was cut short by the
// lock, not by any master: no NodeReply may read timeout and no master may
// be reported failing.
func TestExtendAtTheValidityEndBlamesNoMaster(t *testing.T) {
	r := startReal(t, 5)
	var rec recorder
	c := r.client(WithObserver(rec.observer()))
	ttl := scaled(200 * time.Millisecond)
	cut := 0
	for i := range 10 {
		// A fresh key each time: a late extension may outlive the lock.
		l, err := c.TryLock(bg, fmt.Sprintf("k%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(l.Until()) - 200*time.Microsecond) // the scenario: extend at the last moment
		if err := l.Extend(bg, ttl); err != nil {
			cut++
		}
		_ = l.Unlock(bg)
	}
	if cut == 0 {
		t.Fatal("every last-moment Extend won: the test proves nothing")
	}
	for _, e := range snapshot(&rec, &rec.replies) {
		if e.Outcome == NodeTimeout || (e.Outcome == NodeCanceled && errors.Is(e.Err, ErrNodeTimeout)) {
			t.Fatalf("NodeReply %+v: a healthy master blamed for the lock's own end", e)
		}
	}
	for _, e := range snapshot(&rec, &rec.rounds) {
		for _, n := range e.Nodes {
			if n.Outcome == NodeTimeout {
				t.Fatalf("Round %s: master %d reads timeout (%v), where its NodeReply does not", e.Op, n.Node, n.Err)
			}
		}
	}
	if s := snapshot(&rec, &rec.states); len(s) > 0 {
		t.Fatalf("NodeState events %+v: healthy masters reported failing", s)
	}
	t.Logf("%d of 10 last-moment Extends were cut short by the validity's end", cut)

	// Healthy but slow masters (20 ms a script, well within their 100 ms
	// deadline): the round surely ends at the validity's end with every
	// master still pending. Its event must say so without blaming them.
	// A sleep that overshoots the 5 ms (-race, a loaded machine) leaves the
	// Extend no validity to send a round in: another lock, up to 5 times.
	slow := r.client(WithObserver(rec.observer()), WithNodeTimeout(scaled(100*time.Millisecond)))
	hookAll(r.clients, &scriptHook{script: script.Extend, before: func(context.Context) {
		time.Sleep(scaled(20 * time.Millisecond)) // latency, not synchronisation
	}})
	var rounds []RoundEvent
	for try := 0; len(rounds) == 0; try++ {
		if try == 5 {
			t.Fatal("5 last-moment Extends sent no round: each began after the validity's end")
		}
		l, err := slow.TryLock(bg, fmt.Sprintf("slow%d", try), scaled(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := len(snapshot(&rec, &rec.rounds))
		time.Sleep(time.Until(l.Until()) - scaled(5*time.Millisecond)) // the scenario: extend at the last moment
		if err := l.Extend(bg, scaled(time.Second)); err == nil {
			t.Fatal("an Extend with 5 ms left won on masters that take 20 ms")
		}
		rounds = snapshot(&rec, &rec.rounds)[before:]
		_ = l.Unlock(bg)
	}
	if len(rounds) != 1 || rounds[0].Op != "extend" {
		t.Fatalf("rounds after the slow Extend: %+v, want its one round", rounds)
	}
	for _, n := range rounds[0].Nodes {
		if n.Outcome != NodeCanceled || errors.Is(n.Err, ErrNodeTimeout) {
			t.Fatalf("slow Extend's round: master %d reads %v (%v), want canceled by the validity's end", n.Node, n.Outcome, n.Err)
		}
	}
}

// TestCappedRoundsStillBlameHungMasters: the exemption above must not hide
// a hung master. An acquisition whose validity ends before the masters'
// deadline (a node timeout longer than the lock) gives a master no longer
// than that validity, and one that does not answer is failing, in its
// replies, its state and the round's event. A driver's
// own read timeout during a last-moment Extend is the master's too: the
// driver, not the lock's end, gave up on it.
func TestCappedRoundsStillBlameHungMasters(t *testing.T) {
	// Both driver settings: with ContextTimeoutEnabled, the driver's socket
	// deadline (the round's) races the library's own timer, and when it wins
	// the master is blamed whatever the library would have said; without
	// it, only the library's deadline ends the requests, so the outcome
	// depends on that deadline alone.
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("acquisition capped by its validity/ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			acquisitionCapped(t, ctxTimeouts)
		})
	}
	t.Run("driver read timeout in a last-moment Extend", func(t *testing.T) {
		r := startReal(t, 5)
		var rec recorder
		c := clientOnReal(t, r, redis.Options{MaxRetries: -1, ReadTimeout: scaled(100 * time.Millisecond)},
			WithObserver(rec.observer()), WithNodeTimeout(scaled(200*time.Millisecond)))
		l, err := c.TryLock(bg, "k", scaled(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		r.servers[4].Pause()
		time.Sleep(time.Until(l.Until()) - scaled(30*time.Millisecond)) // the scenario: extend at the last moment
		_ = l.Extend(bg, scaled(2*time.Second))
		awaitBlamed(t, &rec, "extend")
	})
}

// acquisitionCapped: an acquisition whose validity ends before the node
// timeout, against a majority of hung masters, still blames them (the
// validity's end is the masters' deadline then).
func acquisitionCapped(t *testing.T, ctxTimeouts bool) {
	r := startReal(t, 5)
	var rec recorder
	// The driver's read timeout, long after the round's end, only bounds
	// how long the hung requests take to come back and be reported.
	c := clientOnReal(t, r, redis.Options{MaxRetries: -1, ContextTimeoutEnabled: ctxTimeouts, ReadTimeout: scaled(time.Second)},
		WithObserver(rec.observer()), WithNodeTimeout(10*time.Second))
	for i := 2; i < 5; i++ { // a majority hung: the round waits for them until its deadline
		r.servers[i].Pause()
	}
	if _, err := c.TryLock(bg, "k", scaled(300*time.Millisecond)); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with three masters of five hung = %v, want ErrNotObtained", err)
	}
	awaitBlamed(t, &rec, "lock")
	rounds := snapshot(&rec, &rec.rounds)
	if len(rounds) == 0 || rounds[0].Nodes[4].Outcome != NodeTimeout {
		t.Fatalf("Round events %+v: want the hung master's timeout in the acquisition's round", rounds)
	}
}

// clientOnReal is a Client on r's masters, each through a go-redis client
// with options ro; the masters resume and the Client closes at the end.
func clientOnReal(t *testing.T, r *realNodes, ro redis.Options, opts ...Option) *Client {
	var nodes []redis.UniversalClient
	for _, s := range r.servers {
		o := ro
		nodes = append(nodes, s.Client(&o))
	}
	c, err := New(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range r.servers {
			s.Resume()
		}
		_ = c.Close()
	})
	return c
}

// awaitBlamed waits until master 4 was reported failing and a reply of op
// from it timed out.
func awaitBlamed(t *testing.T, rec *recorder, op string) {
	t.Helper()
	for bound := time.Now().Add(scaled(5 * time.Second)); ; time.Sleep(5 * time.Millisecond) {
		var failing, timedOut bool
		for _, e := range snapshot(rec, &rec.states) {
			failing = failing || (e.Node == 4 && !e.Healthy)
		}
		for _, e := range repliesOf(rec, 4) {
			timedOut = timedOut || (e.Op == op && e.Outcome == NodeTimeout)
		}
		if failing && timedOut {
			return
		}
		if time.Now().After(bound) {
			t.Fatalf("the hung master was not blamed: states %+v, its replies %+v", snapshot(rec, &rec.states), repliesOf(rec, 4))
		}
	}
}

// wantOutcomes fails t unless every Acquire event rec holds has outcome want.
func wantOutcomes(t *testing.T, rec *recorder, want AcquireOutcome) {
	t.Helper()
	for _, e := range snapshot(rec, &rec.acquires) {
		if e.Outcome != want {
			t.Fatalf("Acquire event %+v: outcome %v, want %v", e, e.Outcome, want)
		}
	}
}
