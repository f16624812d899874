package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/script"
)

// preferredOf returns the nodes a quorum-first attempt on key asks first,
// and those it holds in reserve.
func preferredOf(c *Client, key string) (preferred, reserves []int) {
	r := c.reserves(key)
	for i := range c.nodes {
		if r&(1<<i) != 0 {
			reserves = append(reserves, i)
		} else {
			preferred = append(preferred, i)
		}
	}
	return preferred, reserves
}

// scripts counts, per master, the scripts it ran.
func scripts(m *minis) (counts []*atomic.Int64) {
	for _, s := range m.servers {
		n := new(atomic.Int64)
		counts = append(counts, n)
		s.SetPreHook(func(cmd string, _ []string) error {
			if cmd == "EVALSHA" || cmd == "EVAL" {
				n.Add(1)
			}
			return nil
		})
	}
	return counts
}

func TestQuorumFirstAsksAMajorityAndReleasesOnlyThere(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst(), WithNodeTimeout(scaled(4*time.Second)))
	preferred, reserves := preferredOf(c, "k")
	if len(preferred) != 3 || len(reserves) != 2 {
		t.Fatalf("preferred %v, reserves %v: want 3 and 2", preferred, reserves)
	}
	warm(t, c)
	// The hedge at its longest, half the node deadline: a round slowed by
	// a loaded machine (the whole package in parallel) asks no reserve.
	c.usualRound.Store(int64(time.Hour))
	ran := scripts(m)
	l := mustLock(t, c, "k", time.Minute)
	vs := m.values("k")
	for _, i := range preferred {
		if vs[i] != l.Token() {
			t.Errorf("preferred master %d holds %q, want the token", i, vs[i])
		}
	}
	unlockLeavesNothing(t, c, m, l, "")
	for _, i := range reserves {
		if n := ran[i].Load(); n != 0 {
			t.Errorf("reserve %d ran %d scripts for a lock the preferred masters decided, want none", i, n)
		}
	}
	for _, i := range preferred {
		if n := ran[i].Load(); n != 2 {
			t.Errorf("preferred master %d ran %d scripts, want 2 (acquire, release)", i, n)
		}
	}
}

// Clients that list the masters in another order ask the same ones first
// for a key (so that contenders meet on them), and keys spread over every
// master.
func TestQuorumFirstPrefersTheSameMastersInEveryClient(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	reversed := make([]int, 5)
	for i := range reversed {
		reversed[i] = 4 - i
	}
	rc, err := New(reorder(m.clients, reversed), WithQuorumFirst())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	asked := make([]int, 5)
	for k := range 500 {
		key := fmt.Sprintf("key-%d", k)
		p, _ := preferredOf(c, key)
		rp, _ := preferredOf(rc, key)
		for j, i := range p {
			asked[i]++
			if want := 4 - i; !contains(rp, want) {
				t.Fatalf("%q: Client 1 prefers %v, the reversed Client %v (index %d there is master %d)", key, p, rp, j, i)
			}
		}
	}
	for i, n := range asked {
		if n < 200 || n > 400 { // 300 expected
			t.Errorf("master %d is preferred for %d of 500 keys, want about 300", i, n)
		}
	}
}

// warm takes, extends and releases a lock, so that c's connections are
// open, every master knows the scripts (Extend takes the key on the
// reserves, Unlock releases it on every master) and c knows how long its
// rounds take.
func warm(t *testing.T, c *Client) {
	t.Helper()
	// Every master knows every script. The warm-up below may not reach
	// them all: a loaded machine makes its round hedge, and a reserve's
	// request the round decided without is never sent, nor later widened
	// to. Such a master answered the test's first calls NOSCRIPT and ran
	// them again (a rehearsal's race run: 4 scripts, want 2).
	for _, n := range c.nodes {
		for _, s := range script.BySHA {
			if err := s.Load(bg, goRedisOf(n)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := mustLock(t, c, "warm", time.Minute)
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	if c.usualRound.Load() == 0 {
		t.Fatal("no round counted towards the usual round")
	}
}

// unlockLeavesNothing unlocks l, settles c, and checks that no master
// holds l's token; what names the case in the error.
func unlockLeavesNothing(t *testing.T, c *Client, m *minis, l *Lock, what string) {
	t.Helper()
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 0 {
		t.Errorf("%d masters hold the token after Unlock%s: %q", n, what, m.values("k"))
	}
}

// reorder returns nodes in the order of idx.
func reorder(nodes []redis.UniversalClient, idx []int) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(idx))
	for j, i := range idx {
		out[j] = nodes[i]
	}
	return out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A preferred master that answers no sends the attempt to the reserves at
// once, and the lock is won on the four free masters.
func TestQuorumFirstAsksTheReservesWhenAPreferredMasterRefuses(t *testing.T) {
	m := newMinis(t, 5, nil)
	deadline := scaled(4 * time.Second)
	c := m.client(WithQuorumFirst(), WithNodeTimeout(deadline))
	warm(t, c)
	c.usualRound.Store(int64(time.Hour)) // the hedge at its longest: half the node deadline
	preferred, _ := preferredOf(c, "k")
	m.take(preferred[0], "k", "other", time.Minute)
	start := time.Now()
	l := mustLock(t, c, "k", time.Minute)
	if took := time.Since(start); took >= deadline/4 {
		t.Errorf("TryLock took %v: the reserves waited for the hedge (%v), not asked on the no", took, deadline/2)
	}
	if n := m.count("k", l.Token()); n != 4 {
		t.Errorf("the lock holds %d masters, want the 4 free ones: %q", n, m.values("k"))
	}
	if v := m.values("k")[preferred[0]]; v != "other" {
		t.Errorf("the refusing master holds %q, want the other holder's key", v)
	}
}

// So does a preferred master that fails.
func TestQuorumFirstAsksTheReservesWhenAPreferredMasterFails(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	preferred, _ := preferredOf(c, "k")
	m.servers[preferred[1]].SetError("OOM command not allowed when used memory > 'maxmemory'")
	l := mustLock(t, c, "k", time.Minute)
	if n := m.count("k", l.Token()); n != 4 {
		t.Errorf("the lock holds %d masters, want the 4 that answer: %q", n, m.values("k"))
	}
	if _, reserves := preferredOf(c, "k"); !contains(reserves, preferred[1]) {
		t.Errorf("the failed master %d is still asked first: reserves %v", preferred[1], reserves)
	}
}

// A preferred master that hangs costs a hedge, not its deadline: the
// reserves are asked, the lock is won well before the node deadline, and
// the hung master is asked after the others from then on.
func TestQuorumFirstHedgesAHungPreferredMaster(t *testing.T) {
	m := newMinis(t, 5, nil)
	deadline := scaled(2 * time.Second)
	c := m.client(WithQuorumFirst(), WithNodeTimeout(deadline))
	warm(t, c)
	preferred, _ := preferredOf(c, "k")
	hung := preferred[2]
	arrived, unblock := m.block(hung)
	defer unblock()
	start := time.Now()
	l, err := c.TryLock(bg, "k", time.Minute)
	if err != nil {
		t.Fatalf("TryLock with a hung preferred master: %v", err)
	}
	if took := time.Since(start); took >= deadline/2 {
		t.Errorf("TryLock took %v with a hung preferred master, want a hedge, well under the node deadline %v", took, deadline)
	}
	<-arrived // it was asked first
	now := time.Now().UnixNano()
	if c.nodes[hung].slowUntil.Load() <= now {
		t.Errorf("the hung master %d is not marked slow", hung)
	}
	// On a loaded machine the hedge may find the other preferred masters
	// still on their way too, and mark them slow as well (a rehearsal's race
	// run, 1 in 240 side by side): then the reserves are two of the slow.
	slow := 0
	for _, n := range c.nodes {
		if n.slowUntil.Load() > now {
			slow++
		}
	}
	if _, reserves := preferredOf(c, "k"); !contains(reserves, hung) && slow <= len(reserves) {
		t.Errorf("the hung master %d is still asked first: reserves %v", hung, reserves)
	}
	unblock()
	unlockLeavesNothing(t, c, m, l, " and the hung master's late reply")
}

// On masters whose memories are younger than the restart guard, a vote
// counts only once every master reported its memory: the attempt asks
// them all.
func TestQuorumFirstAsksEveryMasterWhileTheGuardHoldsVotesBack(t *testing.T) {
	m := newMinis(t, 5, nil)
	for _, n := range m.clients {
		if err := n.Del(bg, script.MarkerKey("", false)).Err(); err != nil { // a fresh deployment
			t.Fatal(err)
		}
	}
	c := m.client(WithQuorumFirst())
	l := mustLock(t, c, "k", time.Minute)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the lock holds %d masters, want 5: %q", n, m.values("k"))
	}
}

// Extend asks the masters the attempt never asked to take the key, so a
// lock kept extended is on every master, and survives two of them failing
// as one taken on all of them does.
func TestQuorumFirstExtendTakesTheKeyOnTheReserves(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	preferred, _ := preferredOf(c, "k")
	l := mustLock(t, c, "k", time.Minute)
	if n := m.count("k", l.Token()); n != 3 {
		t.Fatalf("the lock holds %d masters before Extend, want 3", n)
	}
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the lock holds %d masters after Extend, want 5: %q", n, m.values("k"))
	}
	for _, i := range preferred[:2] {
		m.servers[i].SetError("LOADING Redis is loading the dataset in memory")
	}
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Errorf("Extend with two of the first masters failing: %v", err)
	}
	for _, i := range preferred[:2] {
		m.servers[i].SetError("")
	}
	unlockLeavesNothing(t, c, m, l, "")
}

// The first Extend widens the lock even when one of its masters is down.
func TestQuorumFirstExtendWithAMasterOfTheLockDown(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	preferred, _ := preferredOf(c, "k")
	l := mustLock(t, c, "k", time.Minute)
	m.servers[preferred[0]].SetError("LOADING Redis is loading the dataset in memory")
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Errorf("Extend with one master of the lock failing: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the token is on %d masters, want all 5 (the failing one answers errors only): %q", n, m.values("k"))
	}
}

// A reserve that another token holds (a leftover) votes no in Extend's
// round, and is not counted as ours: Extend wins with the others.
func TestQuorumFirstExtendFindsAReserveTaken(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	_, reserves := preferredOf(c, "k")
	l := mustLock(t, c, "k", time.Minute)
	m.take(reserves[0], "k", "other", time.Minute)
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	settle(c)
	if v := m.values("k")[reserves[0]]; v != "other" {
		t.Errorf("the taken reserve holds %q, want the other token untouched", v)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	settle(c)
	if v := m.values("k")[reserves[0]]; v != "other" {
		t.Errorf("Unlock left %q on the taken reserve, want the other token untouched", v)
	}
	if n := m.count("k", l.Token()); n != 0 {
		t.Errorf("%d masters hold the token after Unlock: %q", n, m.values("k"))
	}
}

// Unlock gives the reserves up before its round: an Extend that runs after
// it can no longer take the key there, and leaves nothing behind.
func TestQuorumFirstUnlockGivesTheReservesUp(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	l := mustLock(t, c, "k", time.Minute)
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Extend(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend after Unlock = %v, want ErrNotHeld", err)
	}
	for i, h := range l.holds {
		if h.ask() {
			t.Errorf("master %d can still be asked after Unlock", i)
		}
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 0 {
		t.Errorf("%d masters hold the token: %q", n, m.values("k"))
	}
}

// The hold of a master the attempt never asked: whoever comes first of
// Unlock (giveUpReserved) and Extend (ask) has it, never both.
func TestHoldReservedGoesToUnlockOrExtendOnce(t *testing.T) {
	h := newHolds(1)[0]
	h.reserve()
	if !h.refused() {
		t.Error("a reserved hold does not count as refused")
	}
	ctx, cancel := context.WithTimeout(bg, scaled(time.Second))
	defer cancel()
	if err := h.await(ctx); !errors.Is(err, ErrNodeRefused) {
		t.Errorf("await on a reserved hold = %v, want ErrNodeRefused at once", err)
	}
	if !h.giveUpReserved() || h.ask() {
		t.Error("a reserve Unlock gave up could still be asked")
	}

	h = newHolds(1)[0]
	h.reserve()
	if !h.ask() {
		t.Fatal("ask on a reserved hold = false")
	}
	if h.giveUpReserved() || h.refused() {
		t.Error("Unlock took a reserve an Extend is asking as never asked")
	}
	ctx, cancel = context.WithTimeout(bg, time.Millisecond)
	defer cancel()
	if err := h.await(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("await on a reserve being asked = %v, want it to wait for the call", err)
	}
	if h.abandon() {
		t.Error("Unlock would release a reserve whose call is still on its way")
	}
	if !h.finish(true, nil) {
		t.Error("a yes that came after Unlock gave the node up was not released")
	}
}

// A hold whose call to take the key did not say yes can be asked again
// once that call returned, by one Extend at a time. The new call makes the
// hold pending again: await waits for it, and a release after the lock gave
// the node up is its to send. Unlock ends the asking.
func TestHoldRetakeReopensTheCallOnce(t *testing.T) {
	h := newHolds(1)[0]
	h.reserve()
	if !h.ask() {
		t.Fatal("ask on a reserved hold = false")
	}
	if h.ask() {
		t.Error("a reserve was asked twice while its call is on its way")
	}
	if h.finishCall(true, false, errors.New("OOM command not allowed")) {
		t.Error("a failed take was released though nobody gave the node up")
	}
	if !h.askable() || h.refused() {
		t.Errorf("after a failed take: askable %v, refused %v; want askable, and not refused (it may have landed)", h.askable(), h.refused())
	}
	if !h.ask() {
		t.Fatal("a failed take cannot be asked again")
	}
	if h.ask() || h.askable() {
		t.Error("a node was asked twice at once")
	}
	ctx, cancel := context.WithTimeout(bg, time.Millisecond)
	defer cancel()
	if err := h.await(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("await while the node is asked again = %v, want it to wait for the call", err)
	}
	if h.abandon() {
		t.Error("Unlock would release the node before the new call answered")
	}
	if !h.finishCall(true, true, nil) {
		t.Error("a yes that came after the lock gave the node up was not released")
	}

	h = newHolds(1)[0]
	h.reserve()
	h.ask()
	h.finishCall(true, false, nil) // another token's leftover holds the key
	if !h.refused() || !h.askable() {
		t.Errorf("after a no: refused %v, askable %v; want both", h.refused(), h.askable())
	}
	if h.giveUpReserved() {
		t.Error("a node asked once counts as never asked")
	}
	if h.askable() || h.ask() {
		t.Error("a node to take again can still be asked after Unlock began")
	}

	h = newHolds(1)[0] // a handed lock's
	h.finish(true, nil)
	h.mayRetake()
	if !h.ask() {
		t.Fatal("a handed lock's node cannot be asked to take the key")
	}
	h.finishCall(true, true, nil)
	if h.askable() {
		t.Error("a node that took the key is asked again")
	}
}

// Without the restart guard, a master that restarts empty would take a
// lock on a bare majority down with it: every master is asked.
func TestQuorumFirstWithoutTheGuardAsksEveryMaster(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst(), WithRestartGuard(0))
	if r := c.reserves("k"); r != 0 {
		t.Errorf("reserves %05b without the guard, want none", r)
	}
	l := mustLock(t, c, "k", time.Minute)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the lock holds %d masters, want 5", n)
	}
}

// A widening that did not take a reserve (the master failed, or another
// token held the key there) is asked again by the next Extend: one bad
// moment does not leave the master out for the lock's life. Where the
// failed call had set our key after all (its reply was lost), the next
// Extend lengthens it like any key of the lock. (Found by an adversary
// pass: with maxmemory on a reserve, the master stayed out for good.)
func TestQuorumFirstExtendAsksAgainAfterAFailedWidening(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	_, reserves := preferredOf(c, "k")
	l := mustLock(t, c, "k", time.Minute)
	m.servers[reserves[0]].SetError("OOM command not allowed when used memory > 'maxmemory'.")
	m.take(reserves[1], "k", "other", time.Minute)
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 3 {
		t.Fatalf("the token is on %d masters after a widening both reserves refused, want 3: %q", n, m.values("k"))
	}

	m.servers[reserves[0]].SetError("")
	m.take(reserves[0], "k", l.Token(), 10*time.Second) // as if the failed call had landed
	m.take(reserves[1], "k", "other", time.Millisecond)
	m.fastForward(time.Second) // the other token's key expired
	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("the second Extend: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the token is on %d masters after the second Extend, want 5: %q", n, m.values("k"))
	}
	if d := m.servers[reserves[0]].TTL("k"); d < time.Minute/2 {
		t.Errorf("the key a failed widening left lives %v after an Extend by a minute: not lengthened", d)
	}
	unlockLeavesNothing(t, c, m, l, "")
}

// An Extend whose ctx ended before or while it widened the lock leaves
// the reserves to the next one. (Found by an adversary pass: a cancelled
// widening left the master out for the lock's life, 3 of 3.)
func TestQuorumFirstCancelledWideningLeavesTheReservesAskable(t *testing.T) {
	m := newMinis(t, 5, nil)
	c := m.client(WithQuorumFirst())
	_, reserves := preferredOf(c, "k")
	l := mustLock(t, c, "k", time.Minute)

	ended, cancel := context.WithCancel(bg)
	cancel()
	if err := l.Extend(ended, time.Minute); err == nil {
		t.Log("Extend with an ended ctx won") // either is right; what matters is the next one
	}
	settle(c)

	// The widening reaches reserves[0], hangs there until the Extend's
	// ctx is cancelled, and never runs (the master drops it).
	arrived, gate := make(chan struct{}, 1), make(chan struct{})
	m.servers[reserves[0]].SetPreHook(func(cmd string, _ []string) error {
		if cmd != "EVALSHA" {
			return nil
		}
		arrived <- struct{}{}
		<-gate
		return errors.New("ERR dropped")
	})
	ctx, cancel := context.WithCancel(bg)
	res := make(chan error, 1)
	go func() { res <- l.Extend(ctx, time.Minute) }()
	<-arrived
	cancel()
	if err := <-res; err != nil { // won or not: either is right
		t.Logf("the cancelled Extend: %v", err)
	}
	m.servers[reserves[0]].SetPreHook(nil)
	close(gate)
	settle(c)

	if err := l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("Extend after the cancelled ones: %v", err)
	}
	settle(c)
	if n := m.count("k", l.Token()); n != 5 {
		t.Errorf("the token is on %d masters after the third Extend, want 5: %q", n, m.values("k"))
	}
	unlockLeavesNothing(t, c, m, l, "")
}

// A lock a quorum-first holder hands to another Client's waiter is on the
// masters the holder had, the hand-off leaving free ones free: the
// waiter's first Extend takes the key on the others, as the holder's own
// would have. (Found by an adversary pass: such a lock never widened, 5 of
// 5, and lost its majority with one more master down.)
func TestQuorumFirstLockHandedToAnotherClientWidens(t *testing.T) {
	r := startReal(t, 5)
	// A long node deadline, so a long hedge: the holder's round asks no
	// reserve on a loaded machine.
	h := r.client(WithQuorumFirst(), WithNodeTimeout(scaled(time.Second)))
	w := r.client(WithRetryDelay(time.Minute, time.Minute)) // no attempt of its own meanwhile
	holder := holding(t, h)
	if n := r.count("k", holder.Token()); n != 3 {
		t.Fatalf("the quorum-first holder is on %d masters, want 3", n)
	}
	res := tryLockAsync(w, "k", time.Minute)
	wantKnown(t, h, "k", 1)
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	got := <-res
	if got.err != nil {
		t.Fatalf("the waiter's Lock: %v", got.err)
	}
	if n := h.cfg.test.remoteHandOffs.Load(); n != 1 {
		t.Fatalf("%d hand-offs to the other Client, want 1", n)
	}
	settle(h)
	if n := r.count("k", got.l.Token()); n != 3 {
		t.Fatalf("the handed lock is on %d masters, want the holder's 3: %q", n, r.values("k"))
	}
	if err := got.l.Extend(bg, time.Minute); err != nil {
		t.Fatalf("the handed lock's Extend: %v", err)
	}
	settle(w)
	if n := r.count("k", got.l.Token()); n != 5 {
		t.Errorf("the handed lock is on %d masters after its Extend, want 5: %q", n, r.values("k"))
	}
	if err := got.l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(w)
	if n := r.count("k", ""); n != 5 {
		t.Errorf("the handed lock's Unlock left the key on %d masters: %q", 5-n, r.values("k"))
	}
}

// An Extend that found the lock valid just before Unlock began must not
// take the key on a reserve once Unlock's hand-off to another Client has
// passed that master (it leaves a free master free): nothing would release
// it, and our token would stay there after Unlock returned nil. Staged: the
// Extend waits after its validity check; the hand-off passes the reserves
// (it skips them: our token is not there), and waits on a preferred master
// until the Extend is done. (Found by an adversary pass, 4 of 400 runs,
// when the hand-off ran on the reserves; Unlock now gives the reserves up
// first.)
func TestQuorumFirstExtendRacingAHandOffLeavesNoTokenOnAReserve(t *testing.T) {
	r := startReal(t, 5)
	preferred, reserves := preferredOf(r.client(WithQuorumFirst()), "k")
	var armed atomic.Bool
	handOffAt, handOffGate := make(chan struct{}, 1), make(chan struct{})
	widening, widened := make(chan struct{}, 1), make(chan struct{}, 1)
	clients := make([]redis.UniversalClient, 5)
	for i, s := range r.servers {
		clients[i] = s.Client(nil)
	}
	clients[preferred[0]].AddHook(&scriptHook{script: script.HandOff, before: func(context.Context) {
		if armed.Load() {
			handOffAt <- struct{}{}
			<-handOffGate
		}
	}})
	clients[reserves[0]].AddHook(&scriptHook{
		script: script.Acquire,
		before: func(context.Context) {
			if armed.Load() {
				widening <- struct{}{}
			}
		},
		after: func(context.Context) error {
			if armed.Load() {
				widened <- struct{}{}
			}
			return nil
		},
	})
	h, err := New(clients, WithQuorumFirst())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	w := r.client(WithRetryDelay(time.Minute, time.Minute))

	holder := holding(t, h)
	if n := r.count("k", holder.Token()); n != 3 {
		t.Fatalf("the quorum-first holder is on %d masters, want 3", n)
	}
	res := tryLockAsync(w, "k", time.Minute)
	wantKnown(t, h, "k", 1)

	atHook, goOn := make(chan struct{}), make(chan struct{})
	h.cfg.test.extending = func() {
		close(atHook)
		<-goOn
	}
	extended := make(chan error, 1)
	go func() { extended <- holder.Extend(bg, time.Minute) }()
	<-atHook
	armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- holder.Unlock(bg) }()
	<-handOffAt // the hand-off passed the reserves, and waits on preferred[0]
	close(goOn)
	err = <-extended
	select {
	case <-widening: // the Extend asked the reserve: let its SET land first
		<-widened
	default:
	}
	t.Logf("the racing Extend: %v", err)
	close(handOffGate)
	if err := <-unlocked; err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	got := <-res
	if got.err != nil {
		t.Fatalf("the waiter's Lock: %v", got.err)
	}
	if n := h.cfg.test.remoteHandOffs.Load(); n != 1 {
		t.Fatalf("%d hand-offs to the other Client, want 1", n)
	}
	settle(h)
	if n := r.count("k", holder.Token()); n != 0 {
		t.Errorf("the holder's token is on %d masters after its Unlock handed the lock on: %q", n, r.values("k"))
	}
	if err := got.l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// keyGate holds every command to one node whose key is key (alone or in a
// batch) until open is closed; arrived is closed when the first one came.
type keyGate struct {
	key           string
	arrived, open chan struct{}
	once          sync.Once
}

func (g *keyGate) holds(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 3 && fmt.Sprint(a[3]) == g.key {
			g.once.Do(func() { close(g.arrived) })
			<-g.open
			return
		}
	}
}

func (g *keyGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *keyGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.holds(cmd)
		return next(ctx, cmd)
	}
}
func (g *keyGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.holds(cmds...)
		return next(ctx, cmds)
	}
}

// A call that asks a reserve again and is never sent (its Extend lost the
// lock while the request queued) leaves the hold as the call before it
// left it: that one failed after setting our key, so the key is released.
// (Found by an adversary pass, 10 of 10: the unsent call recorded "nothing
// here", and our token stayed on the reserve for its TTL after Unlock.)
func TestQuorumFirstUnsentRetakeStillReleasesWhatTheFailedCallLeft(t *testing.T) {
	r := startReal(t, 5)
	probe := r.client(WithQuorumFirst()) // the preference depends on the masters' addresses only
	preferred, reserves := preferredOf(probe, "k")
	x := reserves[0]
	blocker := "" // a key asked first on x, to hold x's pipe busy
	for i := 0; blocker == ""; i++ {
		if p, _ := preferredOf(probe, fmt.Sprint("b", i)); contains(p, x) {
			blocker = fmt.Sprint("b", i)
		}
	}
	var lose atomic.Bool
	gate := &keyGate{key: blocker, arrived: make(chan struct{}), open: make(chan struct{})}
	clients := make([]redis.UniversalClient, 5)
	for i, s := range r.servers {
		clients[i] = s.Client(nil)
	}
	clients[x].AddHook(&scriptHook{script: script.Acquire, after: func(context.Context) error {
		if lose.CompareAndSwap(true, false) {
			return errors.New("read tcp: connection reset by peer") // the reply lost, the SET landed
		}
		return nil
	}})
	clients[x].AddHook(gate)
	h, err := New(clients, WithQuorumFirst())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })

	l := mustLock(t, h, "k", 10*time.Second)
	lose.Store(true)
	_ = l.Extend(bg, 10*time.Second) // won or not: x's reply is lost
	settle(h)
	if v := r.values("k")[x]; v != l.Token() {
		t.Fatalf("reserve %d holds %q after the widening whose reply was lost, want our token", x, v)
	}
	for _, i := range preferred { // the lock's keys vanished there
		if err := r.admin[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan error, 1)
	go func() {
		bl, err := h.Lock(bg, blocker, 10*time.Second)
		if err == nil {
			err = bl.Unlock(bg)
		}
		blocked <- err
	}()
	<-gate.arrived
	if err := l.Extend(bg, 10*time.Second); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend with the lock's keys gone = %v, want ErrNotHeld", err)
	}
	close(gate.open) // x's queued request to take the key again is not sent
	if err := <-blocked; err != nil {
		t.Fatalf("the blocker's Lock and Unlock: %v", err)
	}
	settle(h)
	if n := r.count("k", l.Token()); n != 0 {
		t.Errorf("the given-up lock's token stays on %d masters: %q", n, r.values("k"))
	}
}

// An Extend by less than the validity left confirms Until: it asks no
// master to take the key, since a key taken now lives only ttl and cannot
// vouch for Until. With the lock's keys gone from a majority, it finds the
// lock lost. (Found by an adversary pass, 5 of 5 each: a handed lock, and a
// quorum-first lock asking its reserves again, re-created the key for
// 300 ms on the masters that lost it, returned nil with Until a minute
// ahead, and another Client then took the key.)
func TestExtendByLessThanTheValidityLeftTakesNoMaster(t *testing.T) {
	t.Run("handed by another Client", func(t *testing.T) {
		r := startReal(t, 5)
		h := r.client()
		w := r.client(WithRetryDelay(time.Minute, time.Minute))
		holder := holding(t, h)
		res := tryLockAsync(w, "k", time.Minute)
		wantKnown(t, h, "k", 1)
		if err := holder.Unlock(bg); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		got := <-res
		if got.err != nil {
			t.Fatal(got.err)
		}
		if n := h.cfg.test.remoteHandOffs.Load(); n != 1 {
			t.Fatalf("%d hand-offs to the other Client, want 1", n)
		}
		settle(h)
		for i := range 3 { // the key vanished on a majority
			if err := r.admin[i].Del(bg, "k").Err(); err != nil {
				t.Fatal(err)
			}
		}
		shortExtendFindsTheLockLost(t, r, w, got.l)
	})
	t.Run("quorum-first, its reserves asked again", func(t *testing.T) {
		r := startReal(t, 5)
		h := r.client(WithQuorumFirst(), WithNodeTimeout(scaled(time.Second)))
		preferred, reserves := preferredOf(h, "k")
		l := mustLock(t, h, "k", time.Minute)
		for _, i := range reserves {
			r.take(i, "k", "leftover", time.Minute)
		}
		if err := l.Extend(bg, time.Minute); err != nil { // refused on both reserves
			t.Fatalf("Extend: %v", err)
		}
		settle(h)
		for _, i := range append(reserves, preferred[:2]...) { // the leftovers, and two of the lock's keys
			if err := r.admin[i].Del(bg, "k").Err(); err != nil {
				t.Fatal(err)
			}
		}
		shortExtendFindsTheLockLost(t, r, h, l)
	})
}

// shortExtendFindsTheLockLost extends l, whose keys are gone from a
// majority, by much less than its validity left, and checks that Extend
// finds it lost and re-creates no key.
func shortExtendFindsTheLockLost(t *testing.T, r *realNodes, c *Client, l *Lock) {
	t.Helper()
	before := r.count("k", l.Token())
	if err := l.Extend(bg, 300*time.Millisecond); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Extend(300ms) with the lock on %d of 5 masters = %v (Until %v ahead), want ErrNotHeld: %q, PTTLs %v",
			before, err, time.Until(l.Until()).Round(time.Millisecond), r.values("k"), r.pttls("k"))
	}
	settle(c)
	if n := r.count("k", l.Token()); n != 0 {
		t.Errorf("the lost lock's token is on %d masters after Extend gave it up: %q", n, r.values("k"))
	}
}
