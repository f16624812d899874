package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/wait"
)

// Tests of how waiters of different Clients use the key's notices.

// withLinger sets how long a key's subscription outlives its waiters.
func withLinger(d time.Duration) Option {
	return func(cfg *config) error {
		cfg.test.linger = d
		return nil
	}
}

func TestParseNoticeRejectsWhatIsNotANotice(t *testing.T) {
	for _, msg := range []string{
		"", "acquired", "acquired c t", "acquired c t x", "acquired c t -1",
		"acquired c t 99999999999999999999", "taken c t 1", "released c t 1 extra",
		"acquired c t 01", "acquired c t +1",
	} {
		if _, _, _, _, ok := script.ParseNotice(msg); ok {
			t.Errorf("parseNotice(%q) accepted it", msg)
		}
	}
	kind, client, token, age, ok := script.ParseNotice("acquired c1 tok 3")
	if !ok || kind != script.AcquiredNotice || client != "c1" || token != "tok" || age != 3 {
		t.Fatalf("parseNotice of a good notice = %q %q %q %d %v", kind, client, token, age, ok)
	}
}

// TestChannelKeyTellsTheClientsHandedChannel: a Client takes its own
// handedChannel of a key, plain or sharded, for that key's; the same
// channel is, to any other Client, the notice channel of the key
// "handed:<id>:<key>", as it is for a key of that name.
func TestChannelKeyTellsTheClientsHandedChannel(t *testing.T) {
	for _, tc := range []struct {
		channel, id, key string
		handed, ok       bool
	}{
		{script.NoticeChannel("k"), "me", "k", false, true},
		{script.HandedChannel("k", "me"), "me", "k", true, true},
		{script.HandedChannel("a:b", "me"), "me", "a:b", true, true},
		{script.HandedChannel("k", "other"), "me", "handed:other:k", false, true},
		{script.HandedChannel("k", "me"), "", "handed:me:k", false, true},
		{script.ShardedChannel("{t}k"), "me", "{t}k", false, true},
		{script.ChannelOn("{t}k", script.HandedChannel("{t}k", "me"), true), "me", "{t}k", true, true},
		{"other:channel", "me", "", false, false},
		{"{t", "me", "", false, false},
	} {
		key, handed, ok := script.ChannelKey(tc.channel, tc.id)
		if key != tc.key || handed != tc.handed || ok != tc.ok {
			t.Errorf("channelKey(%q, %q) = %q, %v, %v; want %q, %v, %v", tc.channel, tc.id, key, handed, ok, tc.key, tc.handed, tc.ok)
		}
	}
	if ch := script.ChannelOn("{t}k", script.HandedChannel("{t}k", "me"), true); script.HashSlot(ch) != script.HashSlot("{t}k") {
		t.Fatalf("the sharded handedChannel %q is not in its key's slot", ch)
	}
}

// TestAWaiterCountsHandOffsOnlyOnceItsHandedChannelIsConfirmed: a waiter
// announces its want (wants.go) once a majority of masters confirmed both
// of its Client's subscriptions for the key: the key's notices, and its
// hand-offs (handedChannel), which it counts; and is woken then. Another
// Client's handedChannel is no channel of this key's.
func TestAWaiterCountsHandOffsOnlyOnceItsHandedChannelIsConfirmed(t *testing.T) {
	w := &wait.Waker{Cfg: wait.Config{ID: "me", Quorum: 2}, Nodes: make([]master.Conn, 3), Keys: map[string]*wait.KeyWatch{}}
	kw := &wait.KeyWatch{Ch: make(chan struct{})}
	w.Keys["k"] = kw
	h := &wait.Watcher{W: w, Key: "k", Kw: kw}
	for i := range 3 {
		w.Confirmed(i, script.NoticeChannel("k"), true)
		w.Confirmed(i, script.HandedChannel("k", "other"), true)
	}
	if h.Subscribed() {
		t.Fatal("subscribed, with no confirmation of the Client's handedChannel")
	}
	ev := h.Events()
	w.Confirmed(0, script.HandedChannel("k", "me"), true)
	if h.Subscribed() {
		t.Fatal("subscribed, with the handedChannel confirmed on a minority")
	}
	w.Confirmed(1, script.HandedChannel("k", "me"), true)
	if !h.Subscribed() {
		t.Fatal("not subscribed, with both channels confirmed on a majority")
	}
	select {
	case <-ev:
	default:
		t.Fatal("the waiters were not woken when the handedChannel's majority confirmed")
	}
	w.Confirmed(1, script.HandedChannel("k", "me"), false)
	if h.Subscribed() {
		t.Fatal("subscribed, after the handedChannel's subscription ended on a master")
	}

	// On it, only a hand-off to this Client counts.
	won := h.Expect("tok", time.Minute)
	for i := range 3 {
		w.Notice(i, script.HandedChannel("k", "me"), "handed other tok 0")
		w.Notice(i, script.HandedChannel("k", "me"), "acquired me tok 0")
	}
	if kw.Expects.Count("tok") != 0 || kw.Latest != wait.NoEvent {
		t.Fatalf("notices not of a hand-off to this Client counted on its handedChannel: %d nodes, event %v", kw.Expects.Count("tok"), kw.Latest)
	}
	w.Notice(0, script.HandedChannel("k", "me"), "handed me tok 0")
	w.Notice(2, script.HandedChannel("k", "me"), "handed me tok 0")
	select {
	case <-won:
	default:
		t.Fatal("a majority's hand-off notices on the handedChannel did not give the waiter the key")
	}
}

// FuzzParseNotice: whatever is published on a notice channel (anyone with
// access to a node can), parsing never panics, and what it accepts is what
// a Client would have sent.
func FuzzParseNotice(f *testing.F) {
	f.Add("acquired 1b4e28ba-2fa1-11d2-883f-0016d3cca427 6f1c 7")
	f.Add("released a b 0")
	f.Add(" acquired  a  b  1 ")
	f.Add("acquired 0 0 00") // not how a Client writes 0: found by the fuzzer
	f.Fuzz(func(t *testing.T, msg string) {
		kind, client, token, age, ok := script.ParseNotice(msg)
		if !ok {
			return
		}
		if again := script.NewNotice(kind, "k", client, token, age).Message; strings.Join(strings.Fields(msg), " ") != again {
			t.Fatalf("parseNotice(%q) accepted a notice a Client formats as %q", msg, again)
		}
	})
}

// recordedClients returns fresh go-redis clients for r's servers, and a
// count of the commands sent through them, so that one Client's commands
// can be told from another's.
func (r *realNodes) recordedClients() ([]redis.UniversalClient, func() int) {
	cs := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		cs[i] = s.Client(nil)
	}
	return cs, countCommands(cs)
}

// watchState reads c's view of key under the waker's lock.
func watchState(c *Client, key string) (kw wait.KeyWatch, ok bool) {
	c.wk.Mu.Lock()
	defer c.wk.Mu.Unlock()
	if p := c.wk.Keys[key]; p != nil {
		return *p, true
	}
	return wait.KeyWatch{}, false
}

// awaitSubscribed waits until at least n of c's masters confirmed its
// subscription to key's notices.
func awaitSubscribed(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	within(t, scaled(5*time.Second), "the subscriptions to "+key+"'s notices", func() bool {
		for {
			if kw, _ := watchState(c, key); kw.Nsubs >= n && kw.Nhsubs >= n {
				return true
			}
			time.Sleep(time.Millisecond) // the waker offers tests no signal
		}
	})
}

// expecting is how many of c's announced tokens for key await a hand-off.
func expecting(c *Client, key string) int {
	c.wk.Mu.Lock()
	defer c.wk.Mu.Unlock()
	if kw := c.wk.Keys[key]; kw != nil {
		return kw.Expects.Len()
	}
	return 0
}

// TestWaiterStandsDownWhenAnotherClientTakesTheKey: a waiter woken by a
// release whose contention delay is still running hears another Client take
// the key; it must not send an attempt that must fail, and must still get
// the key at the next release, long before its backoff. (The taker's
// Client watches the key, as one with waiters of its own does: a Client
// that watches nothing takes a key without a notice, and a waiter that
// hears nothing tries the key, and marks it for the taker's release.)
func TestWaiterStandsDownWhenAnotherClientTakesTheKey(t *testing.T) {
	r := startReal(t, 5)
	holderC, takerC := r.client(), r.client()
	defer takerC.wk.Watch("k").Close()
	waiterNodes, waiterCmds := r.recordedClients()
	backoff := scaled(5 * time.Second)
	waiterC, err := New(waiterNodes, WithRetryDelay(backoff, 2*backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer waiterC.Close()

	holder := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	r.subscribed("k")
	// One slot of 100 ms ahead of the waiter after the release: it is
	// still waiting when the taker's notices arrive.
	slot := scaled(100 * time.Millisecond)
	waiterC.wk.Mu.Lock()
	kw := waiterC.wk.Keys["k"]
	kw.Depth, kw.Factor, kw.Round = 2, 1, slot
	waiterC.wk.Mu.Unlock()

	before := waiterCmds()
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(5*time.Second))
	defer cancel()
	taker, err := takerC.Lock(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	within(t, scaled(5*time.Second), "the waiter hearing the taker", func() bool {
		for {
			if kw, _ := watchState(waiterC, "k"); kw.Latest == wait.Taken && kw.Holder == taker.Token() {
				return true
			}
			time.Sleep(time.Millisecond) // the waker offers tests no signal
		}
	})
	// Its delay (at most 1.5 slots) runs out in this window: an attempt
	// would show here.
	time.Sleep(3 * slot)
	if n := waiterCmds() - before; n != 0 {
		t.Fatalf("the waiter sent %d commands after another Client had taken the key", n)
	}
	released := time.Now()
	if err := taker.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the waiter stood down and never came back")
	if d := time.Since(released); d > backoff/2 {
		t.Fatalf("the waiter took %v after the release, not well under its backoff %v", d, backoff)
	}
}

// TestSubscriptionLingersAfterTheLastWaiter: a Client keeps a contended
// key's subscription for a while after its last waiter got the lock (the
// next contention needs no SUBSCRIBE), then drops it.
func TestSubscriptionLingersAfterTheLastWaiter(t *testing.T) {
	r := startReal(t, 3)
	linger := scaled(300 * time.Millisecond)
	// The holder, whose release notice reached the waiter, watches the key
	// from then on as well.
	holderC := r.client(withLinger(linger))
	waiterC := r.client(withLinger(linger))
	holder := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	r.subscribed("k")
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLock(t, res, "the waiter did not get the released lock")
	got := time.Now()
	_, watching := watchState(waiterC, "k")
	for i := range r.admin {
		if n := r.numsub(i, "k"); (n == 0 || !watching) && time.Since(got) < linger {
			t.Fatalf("node %d: %d subscribers right after the waiter got the lock (watching: %v), want the waiter's lingering one", i, n, watching)
		}
	}
	within(t, linger+scaled(5*time.Second), "unsubscribing after the linger", func() bool {
		for {
			gone := true
			for i := range r.admin {
				gone = gone && r.numsub(i, "k") == 0
			}
			if gone {
				return true
			}
			time.Sleep(time.Millisecond) // the server offers no signal
		}
	})
	if _, ok := watchState(waiterC, "k"); ok {
		t.Fatal("the Client still has a watch on the key after the linger")
	}
}

// TestReleaserDoesNotBargeAheadOfOtherClients: three Clients (as three
// processes) take one key in turn, each asking again right after its
// Unlock. Without notices the releaser, asking first, wins almost every
// time (see BenchmarkContended, polling); with them, the Clients that
// waited longer go first.
func TestReleaserDoesNotBargeAheadOfOtherClients(t *testing.T) {
	r := startReal(t, 5)
	const workers, rounds = 3, 60
	cs := make([]*Client, workers)
	for i := range cs {
		cs[i] = r.client()
	}
	type turn struct{ worker int }
	turns := make(chan turn, workers*rounds)
	ctx, cancel := context.WithTimeout(bg, scaled(60*time.Second))
	defer cancel()
	errs := make(chan error, workers)
	for w, c := range cs {
		go func() {
			for range rounds {
				l, err := c.Lock(ctx, "k", time.Minute)
				if err != nil {
					errs <- err
					return
				}
				turns <- turn{w}
				time.Sleep(2 * time.Millisecond) // the critical section
				if err := l.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(turns)
	last, same, total := -1, 0, 0
	for tu := range turns {
		if tu.worker == last {
			same++
		}
		last = tu.worker
		total++
	}
	share := float64(same) / float64(total-1)
	t.Logf("the releaser took the key again in %d of %d hand-overs (%.0f%%)", same, total-1, 100*share)
	if share > 0.5 {
		t.Fatalf("the releaser won %.0f%% of hand-overs, want at most 50%% among %d Clients", 100*share, workers)
	}
}

// TestUnlockHandsTheLockToTheNextLocalWaiter: with a waiter of its own
// queued and nobody else known to want the key, Unlock passes the lock in
// one round (one script per node) instead of a release and an acquisition,
// and the key holds the waiter's token with the waiter's TTL everywhere.
func TestUnlockHandsTheLockToTheNextLocalWaiter(t *testing.T) {
	m := newMinis(t, 5, nil)
	cmds := countCommands(m.clients)
	c := m.client()
	holder, err := c.Lock(bg, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	const waiterTTL = 30 * time.Second
	res := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(bg, "k", waiterTTL)
		res <- lockResult{l, err}
	}()
	queued(t, c, "k", 1)
	for _, n := range m.clients { // so that EVALSHA needs no EVAL after it
		if err := script.HandOff.Load(bg, n).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := cmds()
	began := time.Now()
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock with a local waiter: %v", err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	settle(c)
	if n := cmds() - before; n != len(m.servers) {
		t.Fatalf("the hand-over sent %d commands, want one per node (%d); hand-offs %d", n, len(m.servers), c.cfg.test.handOffs.Load())
	}
	if n := c.cfg.test.handOffs.Load(); n != 1 {
		t.Fatalf("%d hand-offs counted, want 1", n)
	}
	if got.l.Token() == holder.Token() {
		t.Fatal("the waiter got the holder's token, want a fresh one")
	}
	if n := m.count("k", got.l.Token()); n != len(m.servers) {
		t.Fatalf("the waiter's token is on %d of %d nodes", n, len(m.servers))
	}
	for i, s := range m.servers {
		if ttl := s.TTL("k"); ttl > waiterTTL || ttl < waiterTTL-time.Second {
			t.Fatalf("node %d: TTL %v, want the waiter's %v", i, ttl, waiterTTL)
		}
	}
	if end := began.Add(waiterTTL); got.l.Until().After(end) {
		t.Fatalf("the handed lock is valid until %v after the hand-over began, past its TTL", got.l.Until().Sub(began))
	}
	if err := got.l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	if n := m.count("k", got.l.Token()); n != 0 {
		t.Fatalf("the handed lock's Unlock left its token on %d nodes", n)
	}
}

// TestHandOffDoesNotStarveOtherClients: two goroutines of one Client take a
// key in turn, which Unlock hands from one to the other; another Client
// (another process) wants it too. It must get it: its waiter announces
// itself and is handed the key in its turn, or, when it does not announce
// itself (an older version's), once the Client hears that others listen,
// its releases go through Redis again (I13).
func TestHandOffDoesNotStarveOtherClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"announcing", nil},
		{"not-announcing", []Option{withoutWants()}},
	} {
		t.Run(tc.name, func(t *testing.T) { handOffDoesNotStarve(t, tc.opts...) })
	}
}

func handOffDoesNotStarve(t *testing.T, opts ...Option) {
	r := startReal(t, 5)
	local, other := r.client(), r.client(append(opts, WithRetryDelay(scaled(10*time.Millisecond), scaled(50*time.Millisecond)))...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := local.Lock(bg, "k", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond) // the critical section
				_ = l.Unlock(bg)
			}
		}()
	}
	within(t, scaled(5*time.Second), "the first hand-off", func() bool {
		for local.cfg.test.handOffs.Load() == 0 {
			time.Sleep(time.Millisecond) // no signal exists
		}
		return true
	})
	ctx, cancel := context.WithTimeout(bg, scaled(10*time.Second))
	defer cancel()
	l, err := other.Lock(ctx, "k", time.Minute)
	close(stop)
	if err != nil {
		t.Fatalf("the other Client starved: %v (%d hand-offs)", err, local.cfg.test.handOffs.Load())
	}
	t.Logf("the other Client got the key after %d hand-offs", local.cfg.test.handOffs.Load())
	_ = l.Unlock(bg)
	wg.Wait()
}

// TestFailedHandOffStillPassesTheTurn: when the hand-off round cannot reach
// a majority, the queued waiter must still get the turn and make attempts
// of its own, not wait forever for a lock that never comes.
func TestFailedHandOffStillPassesTheTurn(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
	holder, err := c.Lock(bg, "k", time.Minute) // Lock, not TryLock: it holds the turn
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	ctx, cancel := context.WithTimeout(bg, scaled(2*time.Second))
	defer cancel()
	res := lockInBackground(ctx, c, "k")
	queued(t, c, "k", 1)
	for i := range 3 {
		m.block(i)
	}
	if err := holder.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock with the majority hung = %v, want ErrNotHeld", err)
	}
	err = within(t, scaled(10*time.Second), "the waiter's Lock", func() error { return <-res })
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.As(err, &qe) || qe.Op != "lock" {
		t.Fatalf("the waiter's Lock = %v, want ErrNotObtained from attempts of its own", err)
	}
	if c.cfg.test.handOffs.Load() != 0 {
		t.Fatal("a hand-off was counted without a majority")
	}
}

// A lock nobody else wants costs no notice: a Client that watches no waiter
// of the key takes it without announcing it, and its release announces
// nothing unless a waiter of another Client marked the key meanwhile. On
// five masters that is ten PUBLISH calls saved per lock and unlock.
func TestAnUncontendedLockPublishesNothing(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	for range 5 {
		l, err := c.TryLock(bg, "lk:quiet", time.Minute)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		// Unlock returns at a majority: an attempt that overtakes its last
		// deletes finds the key taken and marks it, and that delete is
		// then announced.
		settle(c)
		l, err = c.Lock(bg, "lk:quiet", time.Minute)
		if err != nil {
			t.Fatalf("Lock: %v", err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		settle(c)
	}
	for i, a := range r.admin {
		if n := commandCalls(t, a, "publish", "spublish"); n != 0 {
			t.Errorf("node %d ran %d PUBLISH calls for locks nobody else wanted", i, n)
		}
	}
}

// A wanted key names the value that refused a waiter, not the key: once
// that value is gone, the next holder's quiet release announces nothing,
// though the wanted key outlives the value it named (it expires with the
// lock it was set for).
func TestAStaleWantedKeyAnnouncesNothing(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l, err := c.TryLock(bg, "lk:stale", time.Minute)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	for i, a := range r.admin { // what another Client's refused attempt records
		if err := a.Set(bg, "lk:stale"+script.WantedSuffix, fingerprintOf(l.Token()), time.Minute).Err(); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	before := make([]int64, len(r.admin))
	for i, a := range r.admin {
		before[i] = commandCalls(t, a, "publish", "spublish")
	}
	next, err := c.TryLock(bg, "lk:stale", time.Minute)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := next.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	for i, a := range r.admin {
		if n := commandCalls(t, a, "publish", "spublish") - before[i]; n != 0 {
			t.Errorf("node %d ran %d PUBLISH calls for a lock nobody wanted, under a stale wanted key", i, n)
		}
	}
}

// The release of a key taken without a notice still wakes a waiter of
// another Client: its failed attempt marked the key, and the release of a
// marked key is announced.
func TestAQuietHoldersReleaseWakesAnotherClientsWaiter(t *testing.T) {
	r := startReal(t, 5)
	wokenByRelease(t, r.clients, r.clients, func(l *Lock) {
		if !l.quiet {
			t.Fatal("a Client that watched nothing announced its lock")
		}
	}, func() { r.subscribed("lk:a") })
}

// A lock announced when it was taken is announced when it is released, even
// once its Client stopped watching the key: those who heard it taken wait
// for its release without trying again, so without marking the key.
func TestAnAnnouncedLockIsReleasedAloud(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(withLinger(time.Millisecond))
	h := c.wk.Watch("lk:a") // as a waiter of c's would
	r.subscribed("lk:a")
	listener := r.clients[0].Subscribe(bg, script.NoticeChannel("lk:a"))
	defer listener.Close()
	if _, err := listener.Receive(bg); err != nil { // the confirmation
		t.Fatal(err)
	}
	l, err := c.TryLock(bg, "lk:a", time.Minute)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if l.quiet {
		t.Fatal("a Client that watched the key took it without a notice")
	}
	h.Close()
	within(t, scaled(5*time.Second), "the watch to end", func() bool {
		for c.wk.Listening("lk:a") != 0 {
			time.Sleep(time.Millisecond) // the linger's timer gives no signal
		}
		return true
	})
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	heard := map[string]bool{}
	within(t, scaled(5*time.Second), "the notices", func() bool {
		for !heard[script.ReleasedNotice] {
			m, err := listener.ReceiveMessage(bg)
			if err != nil {
				t.Error(err)
				return false
			}
			kind, _, _, _, _ := script.ParseNotice(m.Payload)
			heard[kind] = true
		}
		return true
	})
	if !heard[script.AcquiredNotice] {
		t.Error("the acquisition was not announced")
	}
}

// TestAWaitersNextAttemptFindsItsLastOnesTokenGone: a waiter's attempt
// lost, refused by masters 1 to 4, and its yes from master 0 came late: its
// token is there. A release on masters 1 and 2 wakes it, and its next
// attempt, which needs master 0, queues there behind that late reply. The
// late yes's clean-up goes ahead of it, so the attempt finds master 0 free
// and takes the lock. (A worker queued the clean-up behind the attempt:
// master 0 refused the waiter for its own last token, the clean-up
// announced nothing, and the waiter slept its backoff with the key free;
// and so it did when the clean-up, first in its batch, was the master's
// first call of the release script. A stress run of the wait tests, six
// race binaries side by side, saw a LockMulti waiter do both.)
func TestAWaitersNextAttemptFindsItsLastOnesTokenGone(t *testing.T) {
	r := startReal(t, 5)
	// The masters have not run the release script yet: sent by its SHA1 in
	// a batch, the clean-up would be answered NOSCRIPT and run again after
	// the attempt (pipe.withSources).
	for i := 1; i < 5; i++ {
		r.take(i, "k", "other", time.Minute)
	}
	replies := make(chan NodeReplyEvent, 32)
	w, reached, open := heldAttempts(t, r, script.Acquire, []int{0},
		WithNodeTimeout(scaled(5*time.Second)), // nothing queued at master 0 goes out beside the held reply meanwhile
		WithRetryDelay(time.Minute, time.Minute),
		withoutWants(), // no want out: its Close has no hand-off to wait out (the node deadline)
		WithObserver(Observer{NodeReply: func(e NodeReplyEvent) {
			if e.Op == "lock" {
				replies <- e
			}
		}}))
	watching(t, w, "k") // subscribed before the first attempt: no subscription's gap wakes the waiter
	// Four refusals could decide the attempt before master 0 was sent its
	// request, which then never is. (Only the first: the next attempt's
	// request to master 0 waits behind the held reply.)
	firstSentTogether(script.Acquire, goRedisClients(w), scaled(5*time.Second))
	res := tryLockAsync(w, "k", time.Minute)
	awaitHeld(t, reached, 1) // its token is on master 0, the reply held
	for range 4 {
		<-replies // masters 1 to 4 refused: the attempt lost
	}
	for _, i := range []int{1, 2} {
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// One notice: a second one, heard during the next attempt, would wake
	// the waiter into a third, which finds the clean-up done anyway.
	release := script.NewNotice(script.ReleasedNotice, "k", "another-client", "other", 0)
	if err := r.admin[1].Publish(bg, release.Channel, release.Message).Err(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		// The next attempt's replies from masters 1 to 4: its request to
		// master 0, asked first, is queued there.
		if e := <-replies; e.Node == 0 {
			t.Fatalf("master 0 answered before its held reply went: %+v", e)
		}
	}
	open()
	awaitFreedLock(t, res, "the waiter's next attempt met its last one's token on master 0, and the waiter sleeps its backoff")
}

// A waiter of another Client whose subscription became active only after the
// holder's release (its connections are slow to open) missed that release,
// and the holder's next lock is quiet: nobody marked it. Once subscribed,
// the waiter tries the key again, and so takes it or marks it: the next
// release wakes it, long before its backoff. (Found by an adversary
// review: without that attempt it slept its whole backoff while the holder
// kept taking the key.)
func TestAWaiterSubscribedAfterTheReleaseStillHearsTheNextOne(t *testing.T) {
	r := startReal(t, 5)
	holderC := r.client()
	waiterC, slow, backoff := slowDialingWaiter(t, r)
	for range 3 { // connections for the waiter's scripts, opened quickly
		l := mustLock(t, waiterC, "warm", time.Minute)
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	settle(waiterC)
	slow.Store(true) // from here, only the subscriptions open new connections

	first := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	awaitMarked(t, r, "k", holderC.quorum) // the waiter's failed attempt
	if err := first.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(holderC)
	for i := range r.servers {
		if n := r.numsub(i, "k"); n != 0 {
			t.Fatalf("master %d had a subscriber before the release: the case is not staged", i)
		}
	}
	second := mustLock(t, holderC, "k", time.Minute)
	awaitSubscribed(t, waiterC, "k", waiterC.quorum)
	if err := second.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLockWithin(t, res, backoff/2, "the waiter slept its backoff through the release")
}

// slowDialingWaiter is a Client over r's masters, with a fixed backoff of
// 10 s (scaled): a waiter that missed a notice waits it out whole. While
// slow is set, its new connections take 300 ms (scaled) to open: its
// subscriptions, or its re-subscriptions after a lost connection.
func slowDialingWaiter(t *testing.T, r *realNodes) (c *Client, slow *atomic.Bool, backoff time.Duration) {
	t.Helper()
	slow = new(atomic.Bool)
	// go-redis goes on dialing in the background after the test (5 tries
	// to a stopped master): its slow dials end with the test, or the
	// leak check at exit finds them sleeping.
	over := make(chan struct{})
	t.Cleanup(func() { close(over) })
	nodes := make([]redis.UniversalClient, len(r.servers))
	for i, s := range r.servers {
		nodes[i] = s.Client(&redis.Options{Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slow.Load() {
				select {
				case <-time.After(scaled(300 * time.Millisecond)):
				case <-ctx.Done():
				case <-over:
				}
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	}
	backoff = scaled(10 * time.Second)
	c, err := New(nodes, WithRetryDelay(backoff, backoff))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, slow, backoff
}

// awaitMarked waits until at least n masters hold key marked as wanted.
func awaitMarked(t *testing.T, r *realNodes, key string, n int) {
	t.Helper()
	within(t, scaled(5*time.Second), "the marks", func() bool {
		for len(r.marked(key)) < n {
			time.Sleep(time.Millisecond) // an attempt gives no signal
		}
		return true
	})
}

// A waiter that subscribes after its failed attempt misses a release made
// before its subscription is active; the subscription becoming active
// wakes it to try again (a gap). That wake may come before the waiter goes
// to sleep, even before it looks at the key's events: it must count from
// the moment it subscribed. Staged here by hooks on the waiter's
// goroutine: the release lands before the subscription, and the
// subscription is active before the waiter looks. (An adversary's burst
// test found a waiter asleep for its whole backoff with the key free and
// its subscription active.)
func TestAWaiterWhoseSubscriptionWasActiveBeforeItLookedTriesAgain(t *testing.T) {
	r := startReal(t, 5)
	holderC := r.client()
	backoff := scaled(time.Minute)
	waiterC := r.client(WithRetryDelay(backoff, backoff))
	attempted, released := make(chan struct{}), make(chan struct{})
	watched, active := make(chan struct{}), make(chan struct{})
	waiterC.cfg.test.beforeWatch = func() { close(attempted); <-released }
	waiterC.cfg.test.afterWatch = func() { close(watched); <-active }

	first := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	<-attempted // refused: the key is marked where it was tried
	if err := first.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(holderC) // released everywhere, heard by nobody
	close(released)
	<-watched
	awaitSubscribed(t, waiterC, "k", len(r.servers))
	close(active)
	awaitLockWithin(t, res, scaled(5*time.Second), "the waiter slept its backoff: the wake of its subscription becoming active was lost")
}

// A waiter whose subscription connections went half-open (each master
// forgot its connection without a word: a rebooted host, a NAT or load
// balancer that dropped the flow) reads nothing on them, and without TCP
// keep-alive never learns of it: every notice is lost. The subscription's
// health check pings a connection that carried nothing for a while, the
// ping draws the reset, and go-redis subscribes again; the waiter, whose
// subscription may have missed a release, tries the key. It takes the
// lock seconds after the release, not at its backoff. (An adversary found
// it deaf for 30 s with keep-alive, and for good without, once the
// subscription read its messages itself, without go-redis's health check.)
func TestAWaiterWhoseSubscriptionsWentHalfOpenHearsAgain(t *testing.T) {
	r := startReal(t, 5)
	holderC := r.client()
	nodes := make([]redis.UniversalClient, len(r.servers))
	proxies := make([]*chaos.Proxy, len(r.servers))
	for i, s := range r.servers {
		p, err := chaos.NewProxy("127.0.0.1:0", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		proxies[i] = p
		nodes[i] = redis.NewClient(&redis.Options{Addr: p.Addr(), Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{KeepAlive: -1} // as a user may: only the health check can tell
			return d.DialContext(ctx, network, addr)
		}})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	backoff := scaled(time.Minute)
	waiterC, err := New(nodes, WithRetryDelay(backoff, backoff))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiterC.Close() })

	first := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	awaitMarked(t, r, "k", holderC.quorum) // the waiter's failed attempt
	awaitSubscribed(t, waiterC, "k", len(r.servers))
	for _, p := range proxies {
		p.Forget()
	}
	within(t, scaled(5*time.Second), "the masters dropping the waiter's subscriptions", func() bool {
		for {
			left := int64(0)
			for i := range r.servers {
				left += r.numsub(i, "k")
			}
			if left == 0 {
				return true
			}
			time.Sleep(time.Millisecond) // the server offers no signal
		}
	})
	if err := first.Unlock(bg); err != nil { // heard by nobody
		t.Fatal(err)
	}
	awaitLockWithin(t, res, scaled(15*time.Second), "the waiter's half-open subscriptions stayed deaf: it slept its backoff")
}

// A waiter whose subscriptions all dropped (a connection reset on every
// master) misses a release made before they are back; the holder's next
// lock is quiet, and nobody marked it. When a master confirms the
// subscription again, the waiter tries the key again, and so takes it or
// marks it: the next release wakes it, long before its backoff. (Found by
// an adversary review.)
func TestAWaiterWhoseSubscriptionsDroppedStillHearsTheNextRelease(t *testing.T) {
	r := startReal(t, 5)
	holderC := r.client()
	waiterC, slow, backoff := slowDialingWaiter(t, r)
	defer waiterC.wk.Watch("k").Close() // subscribed before its first attempt
	r.subscribed("k")

	first := mustLock(t, holderC, "k", time.Minute)
	res := lockInBackground(bg, waiterC, "k")
	awaitMarked(t, r, "k", holderC.quorum) // the waiter's failed attempt
	slow.Store(true)
	killSubscriptions(t, r, "")
	if err := first.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(holderC)
	for i := range r.servers {
		if n := r.numsub(i, "k"); n != 0 {
			t.Fatalf("master %d had a subscriber at the release: the case is not staged", i)
		}
	}
	slow.Store(false) // the reconnections under way stay slow
	second := mustLock(t, holderC, "k", time.Minute)
	r.subscribed("k") // the waiter's, back
	if err := second.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	awaitLockWithin(t, res, backoff/2, "the waiter slept its backoff through the release")
}

// A Lock call that starts by waiting, because its Client heard another
// Client take the key, sends no attempt when a notice that is no release
// wakes it (here a late copy of another acquisition's notices): only a
// release, its timer, or a gap in its subscription sends one. (It did,
// once the waiter counted gaps from zero: 8 Clients contending ran three
// times the commands.)
func TestAWaiterThatStartedWaitingSendsNoAttemptOnOtherNotices(t *testing.T) {
	r := startReal(t, 5)
	holderC, waiterC := r.client(), r.client(WithRetryDelay(time.Minute, time.Minute))
	watching(t, holderC, "k") // its lock is announced
	watching(t, waiterC, "k")
	r.subscribed("k")
	holder := mustLock(t, holderC, "k", time.Minute)
	within(t, scaled(5*time.Second), "the waiter's Client hearing the holder", func() bool {
		for {
			if kw, _ := watchState(waiterC, "k"); kw.Latest == wait.Taken && kw.Holder == holder.Token() {
				return true
			}
			time.Sleep(time.Millisecond) // the waker offers tests no signal
		}
	})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	res := lockInBackground(ctx, waiterC, "k")
	wantKnown(t, holderC, "k", 1) // the call is waiting
	late := script.NewNotice(script.AcquiredNotice, "k", "late-client", "late-token", 0)
	for _, a := range r.admin {
		if err := a.Publish(bg, late.Channel, late.Message).Err(); err != nil {
			t.Fatal(err)
		}
	}
	within(t, scaled(5*time.Second), "the waiter's Client hearing the late notices", func() bool {
		for {
			if kw, _ := watchState(waiterC, "k"); kw.Holder == "late-token" {
				return true
			}
			time.Sleep(time.Millisecond) // the waker offers tests no signal
		}
	})
	time.Sleep(scaled(50 * time.Millisecond)) // an attempt would mark the key by now
	if m := r.marked("k"); len(m) != 0 {
		t.Fatalf("the waiter sent an attempt on a notice that was no release (key marked on masters %v)", m)
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's Lock: %v, want its ctx's end", err)
	}
}

// A release reaches the masters one by one. A waiter acts on the first
// master's notice, and its attempt may lose to the masters the release has
// not reached yet. Their notices, of the same release, are then the only word
// that the key is free: they wake the waiter again. (Found by an adversary
// review of a CI failure: the waiter ignored them as repeats of a release it
// knew, and slept its longest backoff while the key was free.)
func TestAWaiterWhoseAttemptLostToAReleaseOnItsWayHearsTheRestOfIt(t *testing.T) {
	r := startReal(t, 5)
	backoff := scaled(10 * time.Second)
	var armed atomic.Bool
	refused := make(chan struct{}, 3) // an attempt after the first notice, refused by masters 0, 2 and 3
	hook := &scriptHook{script: script.Acquire, after: func(context.Context) error {
		if armed.Load() {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
		return nil
	}}
	w := hookedClient(t, r, hook, []int{0, 2, 3}, WithRetryDelay(backoff, backoff), withLinger(time.Hour))
	for i := range r.servers {
		r.take(i, "k", "other", time.Minute) // a holder outside any Client
	}
	// Subscribed before the call below, so that its one attempt is made
	// while subscribed, and no confirmation sends it another.
	ctx, cancel := context.WithTimeout(bg, scaled(100*time.Millisecond))
	_, _ = w.Lock(ctx, "k", time.Minute)
	cancel()
	awaitSubscribed(t, w, "k", len(r.servers))
	res := lockInBackground(bg, w, "k")
	within(t, scaled(5*time.Second), "the waiter's want", func() bool {
		for {
			if expecting(w, "k") > 0 {
				return true // announced after its attempt: it waits
			}
			time.Sleep(time.Millisecond) // no signal either
		}
	})
	release := func(masters ...int) {
		t.Helper()
		for _, i := range masters {
			if err := r.admin[i].Del(bg, "k").Err(); err != nil {
				t.Fatal(err)
			}
			n := script.NewNotice(script.ReleasedNotice, "k", "other", "other", 0)
			if err := r.admin[i].Publish(bg, n.Channel, n.Message).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	armed.Store(true)
	release(1, 4) // the release's first notices: the waiter tries, and loses
	within(t, scaled(5*time.Second), "the waiter's attempt on the first notice", func() bool {
		for range 3 {
			<-refused
		}
		return true
	})
	release(0, 2, 3)
	awaitLockWithin(t, res, backoff/2, "the waiter slept its backoff with the key free")
}

// TestASubscriptionCutWhileItIsMadeIsMadeAgain: a Client watches a new key
// just after its subscriber connections were killed on random masters (the
// first SUBSCRIBE on a dead connection fails, and go-redis reconnects with
// the channels it had before that one); every master must confirm both of
// the key's channels soon, or the Client hears no notice there until that
// connection drops again. Random: its seed is logged.
func TestASubscriptionCutWhileItIsMadeIsMadeAgain(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	r := startReal(t, 5)
	c := r.client()
	for it := range 100 {
		key := fmt.Sprintf("k%d", it)
		w := c.wk.Watch(key)
		within(t, scaled(5*time.Second), fmt.Sprintf("iteration %d: both of %s's channels confirmed on every master", it, key), func() bool {
			for kw, _ := watchState(c, key); kw.Nsubs < 5 || kw.Nhsubs < 5; kw, _ = watchState(c, key) {
				time.Sleep(time.Millisecond) // the waker has no signal for tests
			}
			return true
		})
		if it%2 == 0 {
			defer w.Close()
		} else {
			w.Close()
		}
		for _, i := range rng.Perm(5)[:1+rng.IntN(5)] {
			_ = r.admin[i].Do(bg, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		}
		time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond) // lands the next SUBSCRIBE anywhere in the reconnect
	}
}
