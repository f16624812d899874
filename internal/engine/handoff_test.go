// What a hand-off costs the masters, and what it must still do: read the
// memory marker when the new TTL is longer, announce itself once another
// Client waits.

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// handOffOnce has a holder of key (taken with holderTTL) hand it to a
// queued waiter of the same Client asking for waiterTTL, and returns the
// server commands the masters ran for the hand-off, by name, counting
// those run inside scripts. before, when not nil, runs while the holder
// holds the key and the waiter is queued.
func handOffOnce(t *testing.T, r *realNodes, c *Client, key string, holderTTL, waiterTTL time.Duration, before func(holder *Lock)) map[string]int64 {
	t.Helper()
	holder, err := c.Lock(bg, key, holderTTL) // Lock: it holds the Client's turn
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(bg, key, waiterTTL)
		res <- lockResult{l, err}
	}()
	queued(t, c, key, 1)
	for _, a := range r.admin { // so that EVALSHA needs no EVAL
		if err := script.HandOff.Load(bg, a).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if before != nil {
		before(holder)
	}
	settle(c)
	handOffs := c.cfg.test.handOffs.Load()
	start := serverCalls(t, r)
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock with a local waiter: %v", err)
	}
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	settle(c)
	if c.cfg.test.handOffs.Load() != handOffs+1 {
		t.Fatal("Unlock did not hand the lock over")
	}
	calls := serverCalls(t, r)
	for name, n := range start {
		calls[name] -= n
		if calls[name] == 0 {
			delete(calls, name)
		}
	}
	if err := got.l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	return calls
}

// serverCalls adds up the commands every master ran, by name, less INFO and
// connection handshakes.
func serverCalls(t *testing.T, r *realNodes) map[string]int64 {
	t.Helper()
	sum := map[string]int64{}
	for _, a := range r.admin {
		calls, err := redistest.CommandCalls(bg, a)
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range calls {
			// Not INFO (this call's), nor a new connection's handshake
			// (HELLO, CLIENT SETINFO), which the pool opens when its
			// connections are busy: not work of the operation counted.
			if name != "info" && name != "hello" && !strings.HasPrefix(name, "client|") {
				sum[name] += n
			}
		}
	}
	return sum
}

// TestHandOffNobodyElseWantsCostsFourCommandsPerMaster: passing a lock to
// the Client's next waiter, when no other Client asked for the key, runs
// EVALSHA, a GET of the key and of its wanted key, and SET on each master:
// no read of the memory marker (the master has held our key since our own
// round) and no PUBLISH (nobody else listens: the wanted key is absent).
func TestHandOffNobodyElseWantsCostsFourCommandsPerMaster(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	calls := handOffOnce(t, r, c, "k", time.Minute, time.Minute, nil)
	want := map[string]int64{"evalsha": 5, "get": 10, "set": 5}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("the hand-off ran %v on the masters, want %v", calls, want)
	}
}

// TestHandOffToALongerTTLRecordsItInTheMarker: a waiter that asks for a
// longer TTL than the holder's gets keys the masters' memory markers do
// not cover yet, so the hand-off must read and raise them: otherwise a
// master that later lost its data would be guarded for too short a time.
func TestHandOffToALongerTTLRecordsItInTheMarker(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	const longer = 3 * time.Minute
	handOffOnce(t, r, c, "k", time.Minute, longer, nil)
	for i, a := range r.admin {
		v, err := a.Get(bg, script.MarkerKey("k", false)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(v); len(f) != 2 || f[1] != fmt.Sprint(longer.Milliseconds()) {
			t.Fatalf("node %d: marker %q after a hand-off to a %v TTL, want it recorded", i, v, longer)
		}
	}
}

// TestHandOffAfterAnExtendToAShorterTTLRecordsIt: the marker of a master
// where Extend repaired our key records only that Extend's TTL, so a
// hand-off to the lock's longer original TTL must read the marker too.
func TestHandOffAfterAnExtendToAShorterTTLRecordsIt(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	calls := handOffOnce(t, r, c, "k", time.Minute, time.Minute, func(holder *Lock) {
		if err := holder.Extend(bg, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	if calls["get"] != 15 {
		t.Fatalf("the hand-off ran %v: want the marker read on every master (15 GETs: the key, its wanted key, the marker)", calls)
	}
}

// TestHandOffIsAnnouncedOnceAnotherClientWaits: a failed attempt of another
// Client marks the key as wanted, and the next hand-off publishes its
// notice on every master: that tells the other Client's waiters who holds
// the key, and tells the holder's Client that others listen, so that its
// next Unlock releases the key through Redis instead of handing it on
// (TestHandOffDoesNotStarveOtherClients).
func TestHandOffIsAnnouncedOnceAnotherClientWaits(t *testing.T) {
	r := startReal(t, 5)
	c, other := r.client(), r.client()
	calls := handOffOnce(t, r, c, "k", time.Minute, time.Minute, func(*Lock) {
		ctx, cancel := context.WithTimeout(bg, scaled(5*time.Second))
		defer cancel()
		for len(r.marked("k")) < 5 {
			if _, err := other.TryLock(ctx, "k", time.Minute); err == nil {
				t.Fatal("another Client took a held key")
			} else if ctx.Err() != nil {
				t.Fatalf("the key is marked on %v only: %v", r.marked("k"), err)
			}
		}
	})
	if calls["publish"] != 5 {
		t.Fatalf("the hand-off of a wanted key ran %v, want a PUBLISH on every master", calls)
	}
}

// marked returns the nodes where key's wanted key names its value.
func (r *realNodes) marked(key string) []int {
	var out []int
	for i, a := range r.admin {
		v, _ := a.Get(bg, key).Result()
		if w, _ := a.Get(bg, key+script.WantedSuffix).Result(); isMarked(v, w) {
			out = append(out, i)
		}
	}
	return out
}

// TestAWantedKeyIsStillTheHolders: once another Client's failed attempts
// marked the key as wanted on every master, the holder's Extend, Fence and
// Unlock still find their token there, and Unlock leaves no key behind.
func TestAWantedKeyIsStillTheHolders(t *testing.T) {
	m := newMinis(t, 5, nil)
	c, other := m.client(), m.client()
	l := mustLock(t, c, "k", time.Minute)
	wanted := func() int {
		n := 0
		for _, s := range m.servers {
			v, _ := s.Get("k")
			if w, _ := s.Get("k" + script.WantedSuffix); v == l.Token() && isMarked(v, w) {
				n++
			}
		}
		return n
	}
	for range 100 {
		if wanted() == len(m.servers) {
			break
		}
		if _, err := other.TryLock(bg, "k", time.Minute); err == nil {
			t.Fatal("another Client took a held key")
		}
		settle(other)
	}
	if n := wanted(); n != len(m.servers) {
		t.Fatalf("the key is marked on %d of %d masters", n, len(m.servers))
	}
	if err := l.Extend(bg, 2*time.Minute); err != nil {
		t.Fatalf("Extend of a wanted key: %v", err)
	}
	settle(c) // Extend returns at a majority; the rest answer in the background
	for i, s := range m.servers {
		if ttl := s.TTL("k"); ttl != 2*time.Minute {
			t.Fatalf("node %d: TTL %v after Extend, want 2m", i, ttl)
		}
	}
	if _, err := l.Fence(bg); err != nil {
		t.Fatalf("Fence of a wanted key: %v", err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatalf("Unlock of a wanted key: %v", err)
	}
	settle(c)
	if n := m.count("k", ""); n != len(m.servers) {
		t.Fatalf("Unlock of a wanted key left it on %d masters: %q", len(m.servers)-n, m.values("k"))
	}
}

// A refused multi-key attempt never writes to a key another token holds: the
// holder's value and expiry stay as they were on every master, and only the
// key's wanted key records the refusal (lua/acquire_multi.lua), naming the
// holder's value on every master the attempt ran on: at least the majority
// whose refusals decided it (a request the decided round had not sent yet
// is never sent).
func TestAFailedMultiAttemptLeavesTheHoldersKeysAsTheyWere(t *testing.T) {
	m := newMinis(t, 5, nil)
	c, other := m.client(), m.client()
	l := mustLock(t, c, "k2", time.Minute)
	if _, err := other.TryLockMulti(bg, []string{"k1", "k2"}, 10*time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLockMulti over a held key = %v, want ErrNotObtained", err)
	}
	settle(other)
	marked := 0
	for i, s := range m.servers {
		v, _ := s.Get("k2")
		if v != l.Token() {
			t.Fatalf("master %d: k2 = %q, want the holder's token", i, v)
		}
		if ttl := s.TTL("k2"); ttl > time.Minute || ttl <= 0 {
			t.Fatalf("master %d: k2's TTL is %v after another's refused attempt, want the holder's minute at most", i, ttl)
		}
		if w, _ := s.Get("k2" + script.WantedSuffix); w != "" {
			if !isMarked(v, w) {
				t.Fatalf("master %d: k2's wanted key %q does not name the holder's value", i, w)
			}
			marked++
		}
		if s.Exists("k1") {
			t.Fatalf("master %d: the refused attempt left k1", i)
		}
	}
	if marked < quorum(len(m.servers)) {
		t.Fatalf("the refusal is recorded on %d masters, fewer than the majority that refused", marked)
	}
}

// TestHandOffAfterTheValidityIsARelease (I12): an Unlock after the lock's
// validity ended releases the key and hands nothing on, even to another
// Client's waiter in line, though the holder's keys still live (a drift
// factor of 0.5 ends the validity halfway through their TTL): they may
// have expired and been taken elsewhere, and nobody could vouch for the
// waiter's lock. The waiter then takes the key by an attempt of its own.
func TestHandOffAfterTheValidityIsARelease(t *testing.T) {
	r := startReal(t, 3)
	handed := make(chan bool, 1)
	h := r.client(WithDriftFactor(0.5), WithObserver(Observer{Release: func(e ReleaseEvent) { handed <- e.HandedOff }}))
	w := r.client(WithRetryDelay(time.Minute, time.Minute)) // it waits on the notices alone
	watching(t, h, "k")
	holder, err := h.Lock(bg, "k", scaled(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	res := tryLockAsync(w, "k", time.Minute)
	wantKnown(t, h, "k", 1)
	time.Sleep(time.Until(holder.Until())) // the validity's end: time itself, not a signal
	if err := holder.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after the validity ended = %v, want ErrNotHeld", err)
	}
	if <-handed {
		t.Fatal("Unlock after the validity ended handed the key on")
	}
	select {
	case got := <-res:
		if got.err != nil {
			t.Fatalf("the waiter's Lock: %v", got.err)
		}
	case <-time.After(scaled(5 * time.Second)):
		t.Fatal("the waiter did not take the released key")
	}
}
