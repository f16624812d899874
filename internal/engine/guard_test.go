package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// restartScene: holder A holds key "k" on masters 0-2 (3 and 4 were taken
// by another token, since released), and master 0 then loses its data.
// Without the guard B wins masters 0, 3 and 4 while A still counts on 0.
func restartScene(t *testing.T, m *minis) (a *Lock) {
	t.Helper()
	m.take(3, "k", "other", time.Minute)
	m.take(4, "k", "other", time.Minute)
	a = mustLock(t, m.client(), "k", time.Minute)
	for _, i := range []int{3, 4} {
		if err := m.clients[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	m.servers[0].FlushAll() // a restart without persistence
	return a
}

// Scenario 10 in one test: a master of the holder's majority restarts
// empty; a Client created after the restart must not count it.
func TestRestartedMasterIsQuarantined(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := restartScene(t, m)
	b := m.client() // made after the restart: it never saw master 0 before
	if _, err := b.TryLock(bg, "k", time.Minute); err == nil {
		t.Fatalf("B got the lock while A (until %v) still counts on the restarted master: %q", time.Until(a.Until()), m.values("k"))
	} else if !errors.Is(err, ErrNodeQuarantined) || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock = %v, want ErrNotObtained naming a quarantined node", err)
	}
	// Its key was set all the same, and released with the failed attempt.
	settle(b)
	if v := m.values("k")[0]; v != "" {
		t.Fatalf("master 0 still holds %q after the failed attempt", v)
	}
}

// The guard's order of events, fixed: in the scene above the young master's
// yes may come first (the next answer's recheck then holds it back) or last,
// completing a majority on the spot. Replies come in whatever order the
// masters give, so the test above meets the second case only by chance; here
// the round counts the votes in that order itself. With a witness (an older
// master among the first answers) the young yes is quarantined (G1); with
// none, three young reports of five are too few, and a fourth (a young no)
// makes it count (G2: core.Witnessed), unless the guard is strict (G3).
func TestAYoungYesThatWouldCompleteTheMajorityIsHeldBack(t *testing.T) {
	m := newMinis(t, 5, nil)
	old := memory{reported: true, age: time.Hour, longest: time.Minute, born: 1}
	young := memory{reported: true, age: time.Second, longest: time.Minute, born: 2}
	for _, tc := range []struct {
		witness, strict, youngFirst, fourth, counted bool
	}{
		{witness: true, strict: false, counted: false},
		{witness: true, strict: true, counted: false},
		{witness: true, youngFirst: true, counted: false},
		{witness: false, strict: false, counted: false},
		{witness: false, strict: false, fourth: true, counted: true},
		{witness: false, strict: true, fourth: true, counted: false},
	} {
		var opts []Option
		if tc.strict {
			opts = append(opts, WithStrictRestartGuard())
		}
		c := m.client(opts...)
		r := &round{op: "lock", key: "k", quorum: 3, start: time.Now(), guardTTL: time.Minute, nodes: 5}
		r.tally = core.NewTally(5, true, tc.strict, memorySlack) // nothing known of the masters before
		first := young                                           // masters 3 and 4: in a fresh deployment as young as master 0
		if tc.witness {
			first = old
		}
		votes := []vote{
			{node: 3, ballot: ballot{yes: true, mem: first}, at: time.Now()},
			{node: 4, ballot: ballot{yes: true, mem: first}, at: time.Now()},
			{node: 0, ballot: ballot{yes: true, mem: young}, at: time.Now()}, // the third yes, last
		}
		if tc.youngFirst { // the young yes before its witnesses: held until they answer
			votes = append(votes[2:], votes[:2]...)
		}
		if tc.fourth { // master 1 refuses, reporting a memory as young
			votes = append([]vote{{node: 1, ballot: ballot{mem: first}, at: time.Now()}}, votes...)
		}
		for _, v := range votes {
			r.count(bg, c, v)
		}
		if counted := r.tally.Decided() && r.won(); counted != tc.counted {
			t.Errorf("%+v: the young master's yes completed the majority: %v (yes=%d)", tc, counted, r.tally.Yes)
		}
		var quarantined bool
		for _, f := range r.failed {
			quarantined = quarantined || (f.Node == 0 && errors.Is(f.Err, ErrNodeQuarantined))
		}
		if tc.witness != quarantined {
			t.Errorf("%+v: master 0 quarantined %v, failures %v", tc, quarantined, r.failed)
		}
	}
}

// The control: with the guard off the same scene lets a second holder in,
// which shows the test above can fail.
func TestWithoutTheGuardARestartLetsASecondHolderIn(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := restartScene(t, m)
	b := m.client(WithRestartGuard(0))
	l, err := b.TryLock(bg, "k", time.Minute)
	if err != nil {
		t.Fatalf("TryLock with the guard off: %v; want the unsafe win the guard prevents", err)
	}
	if !time.Now().Before(a.Until()) || !time.Now().Before(l.Until()) {
		t.Fatal("the two locks should overlap")
	}
}

// Once the restarted master's memory is older than the guard (every lock it
// may have forgotten has expired), it counts again.
func TestQuarantineEndsWithTheGuard(t *testing.T) {
	m := newMinis(t, 5, nil)
	restartScene(t, m)
	b := m.client(WithRestartGuard(2 * time.Minute))
	if _, err := b.TryLock(bg, "k2", time.Second); err != nil { // marks master 0's new memory
		t.Fatal(err)
	}
	settle(b)                      // master 0's vote may come after the majority: b learns its memory then
	m.fastForward(3 * time.Minute) // A's keys are gone too
	for _, i := range []int{1, 2, 3} {
		m.take(i, "k3", "other", time.Hour)
	}
	if _, err := b.TryLock(bg, "k3", time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock with only masters 0 and 4 free: %v", err)
	}
	settle(b) // the failed attempt's clean-up
	if err := m.clients[1].Del(bg, "k3").Err(); err != nil {
		t.Fatal(err)
	}
	l, err := b.TryLock(bg, "k3", time.Second)
	if err != nil {
		t.Fatalf("TryLock on masters 0, 1 and 4 after the guard: %v; master 0 should count again", err)
	}
	_ = l.Unlock(bg)
}

// A fresh deployment (every master new) does not stall: all markers are
// born together, and no master remembers further back.
func TestFreshDeploymentDoesNotStall(t *testing.T) {
	m := newMinis(t, 5, nil)
	for _, s := range m.servers {
		s.FlushAll()
	}
	c := m.client()
	for i := range 3 {
		l, err := c.TryLock(bg, "k", time.Minute)
		if err != nil {
			t.Fatalf("TryLock %d on a fresh deployment: %v", i, err)
		}
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// freshMinis returns n in-process masters of a fresh deployment: none has
// a memory marker yet, so every one is younger than the guard.
func freshMinis(t *testing.T, n int) *minis {
	m := newMinis(t, n, nil)
	for _, s := range m.servers {
		s.FlushAll()
	}
	return m
}

// A fresh deployment with a minority of its masters down or hung takes a
// lock at once (G2): the young masters that answer are a majority, and none
// remembers further back. Here the lock lives on exactly three masters
// (master 3 holds the key for another token), and Extend keeps it. The
// strict guard (G3) is the control: it cannot tell, and says so.
func TestFreshDeploymentWithOneMasterDownTakesALock(t *testing.T) {
	for _, down := range []string{"hung", "down"} {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", down, strict), func(t *testing.T) {
				m := freshMinis(t, 5)
				m.take(3, "k", "other", time.Hour)
				var opts []Option
				if strict {
					opts = append(opts, WithStrictRestartGuard())
				}
				c := m.client(append(opts, WithNodeTimeout(scaled(50*time.Millisecond)))...)
				if down == "hung" {
					m.block(4)
				} else {
					m.servers[4].Close()
				}
				l, err := c.TryLock(bg, "k", time.Minute)
				if strict {
					if err == nil || !errors.Is(err, ErrNodeQuarantined) || !strings.Contains(err.Error(), "cannot tell") {
						t.Fatalf("strict guard, fresh deployment, master 4 %s: TryLock = %v; want the young votes held, saying it cannot tell", down, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("fresh deployment, master 4 %s: TryLock = %v; want the lock", down, err)
				}
				if err := l.Extend(bg, 2*time.Minute); err != nil {
					t.Fatalf("Extend of a lock held on exactly three young masters: %v", err)
				}
				if err := l.Unlock(bg); err != nil {
					t.Fatalf("Unlock: %v", err)
				}
			})
		}
	}
}

// A master that lost its data after a fresh deployment's first lock is
// refused while younger than the guard, though every master is: the masters
// that kept their data remember further back (G1). Here the holder's other
// masters are hung, and the young master would complete a second majority.
func TestAMinorityLossInAFreshDeploymentIsRefused(t *testing.T) {
	m := freshMinis(t, 5)
	m.take(3, "k", "other", time.Minute)
	m.take(4, "k", "other", time.Minute)
	a := mustLock(t, m.client(), "k", time.Minute) // on masters 0, 1 and 2, all young
	for _, i := range []int{3, 4} {
		if err := m.clients[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	m.fastForward(3 * memorySlack)
	m.servers[0].FlushAll() // a restart without persistence, 3 s into the deployment
	m.block(1)
	m.block(2)
	b := m.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
	l, err := b.TryLock(bg, "k", time.Minute)
	if err == nil {
		t.Fatalf("B got the lock (until %v) while A holds it until %v: %q", l.Until(), a.Until(), m.values("k"))
	}
	if !errors.Is(err, ErrNodeQuarantined) || !strings.Contains(err.Error(), "remembers further back") {
		t.Fatalf("TryLock = %v, want master 0 quarantined by a witness", err)
	}
}

// A TTL longer than the guard, used by another Client: this Client learns
// it from the masters (each records the longest TTL it granted) and keeps a
// master that restarted since out for that long.
func TestOtherClientsLongerTTLsExtendTheGuard(t *testing.T) {
	m := newMinis(t, 5, nil)
	x := m.client()
	long := mustLock(t, x, "long", 10*time.Minute) // on every master
	_ = long
	m.take(3, "k", "other", time.Hour)
	m.take(4, "k", "other", time.Hour)
	a := mustLock(t, x, "k", 10*time.Minute)
	m.clients[3].Del(bg, "k")
	m.clients[4].Del(bg, "k")
	m.servers[0].FlushAll()
	m.fastForward(2 * time.Minute) // past the default guard, within A's TTL
	b := m.client()
	if _, err := b.TryLock(bg, "learn", time.Second); err != nil { // B hears of the 10-minute TTL
		t.Fatal(err)
	}
	if _, err := b.TryLock(bg, "k", time.Second); err == nil {
		t.Fatalf("B got k while A holds it for another %v on masters 0-2", time.Until(a.Until()))
	}
}

// A master restarted with its data (the marker is persisted with the keys)
// counts again at once.
func TestRestartWithPersistenceIsNotQuarantined(t *testing.T) {
	r := startReal(t, 5)
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	r.servers[0].Restart(aof...) // empty, persisting from now on
	ageMemory(t, r.clients[:1], establishedAge)
	c := r.client()
	r.servers[0].Restart(aof...) // with its data
	r.take(1, "k", "other", time.Minute)
	r.take(2, "k", "other", time.Minute)
	l, err := c.TryLock(bg, "k", time.Minute) // needs master 0
	if err != nil {
		t.Fatalf("TryLock needing the master restarted with its data: %v", err)
	}
	_ = l.Unlock(context.Background())

	// The same restart without its data is quarantined.
	r.servers[0].Restart()
	r.take(3, "k2", "other", time.Minute)
	r.take(4, "k2", "other", time.Minute)
	if _, err := c.TryLock(bg, "k2", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock needing the master restarted empty: %v, want ErrNodeQuarantined", err)
	}
}

// Extend's repair: a master that lost the lock's key (restarted empty) gets
// it back, counts again once its memory is older than the guard, and so the
// lock outlives masters restarting one at a time. Without repair the third
// loss here would leave two masters.
func TestExtendRepairKeepsALockAcrossRestartsOneAtATime(t *testing.T) {
	m := newMinis(t, 5, nil)
	ttl := 3 * time.Second
	c := m.client(WithRestartGuard(time.Millisecond)) // the guard is then ttl
	l := mustLock(t, c, "k", ttl)
	extend := func(what string, votes int) {
		t.Helper()
		err := l.Extend(bg, ttl)
		var qe *QuorumError
		if votes >= 3 && err != nil {
			t.Fatalf("%s: Extend: %v", what, err)
		}
		if votes < 3 && !errors.As(err, &qe) {
			t.Fatalf("%s: Extend: %v, want a failure", what, err)
		}
		settle(c)
		if n := m.count("k", l.Token()); n != 5 {
			t.Fatalf("%s: our key is on %d masters, want 5 (repaired)", what, n)
		}
	}
	m.servers[0].FlushAll()
	extend("master 0 restarted", 4) // repaired, in quarantine
	m.fastForward(2 * time.Second)
	extend("2 s later", 4) // still in quarantine, keys refreshed
	m.fastForward(2 * time.Second)
	extend("past the guard", 5)
	m.servers[1].FlushAll()
	m.servers[2].FlushAll()
	extend("masters 1 and 2 restarted", 3) // 0, 3 and 4
}

// A late extension (its script reaching a master after Unlock deleted the
// key there) never brings the key back: repair is only for a master whose
// memory began since the lock was set there.
func TestLateExtendNeverRepairsAKeyUnlockDeleted(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(time.Second))
	l := mustLock(t, c, "k", time.Minute)
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before Close, should the test fail while it is shut
	arrived := make(chan struct{}, 1)
	r.clients[0].AddHook(&scriptHook{script: script.Extend, before: func(context.Context) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-gate
	}})
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(bg, time.Minute) }()
	<-arrived // master 0's extension is on its way, held back
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	within(t, scaled(5*time.Second), "Unlock's delete on master 0", func() bool {
		for r.values("k")[0] != "" {
			time.Sleep(time.Millisecond) // another client's command: no signal
		}
		return true
	})
	open()
	if err := <-extended; err != nil {
		t.Logf("the late extension: %v", err) // its outcome says nothing here
	}
	settle(c)
	if v := r.values("k"); r.count("k", "") != 5 {
		t.Fatalf("a late extension brought the key back: %q", v)
	}
}

// A master that lost its data, then had its clock stepped back (NTP
// correcting a rebooted machine) past its new marker's birth: its memory
// is as young as can be, never "no report": B, which would win on the
// restarted master and the free ones, is refused while A holds k.
func TestAClockSteppedBackPastTheMarkerKeepsTheGuardOn(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := restartScene(t, m)
	if l, err := m.client().TryLock(bg, "unrelated", time.Second); err == nil {
		_ = l.Unlock(bg) // a vote marks master 0 again, born now
	}
	m.servers[0].FastForward(-5 * time.Second)
	l, err := m.client().TryLock(bg, "k", time.Minute)
	if err == nil {
		t.Fatalf("B got the lock (until %v) while A holds it until %v: %q", l.Until(), a.Until(), m.values("k"))
	}
	if !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock = %v, want the restarted master quarantined", err)
	}
}

// lua/memory.lua never reports a negative age: a marker born after the
// master's clock's now is 0 ms old.
func TestMemoryScriptNeverReportsANegativeAge(t *testing.T) {
	m := newMinis(t, 1, nil)
	m.servers[0].FlushAll()
	var v [3]int64
	if err := replyInts(master.Script(bg, goredis.New(m.clients[0]), script.GuardCheck.Evalsha(1, script.PlainMarkerKey)), v[:], "guard check"); err != nil {
		t.Fatal(err)
	}
	m.servers[0].FastForward(-5 * time.Second)
	if err := replyInts(master.Script(bg, goredis.New(m.clients[0]), script.GuardCheck.Evalsha(1, script.PlainMarkerKey)), v[:], "guard check"); err != nil {
		t.Fatal(err)
	}
	if v[0] != 0 {
		t.Fatalf("age %d ms for a marker born 5 s after the clock's now; want 0", v[0])
	}
}

// The Client reads any negative age but -1 (the guard off) and -2 (the
// memory it knew) as the youngest memory, reported: never as no report.
func TestANegativeAgeIsTheYoungestMemory(t *testing.T) {
	n := &node{}
	for _, age := range []int64{-3, -5000} {
		if mem := n.memory(nil, age, 60000, 1); !mem.reported || mem.age != 0 {
			t.Fatalf("age %d read as %+v; want reported, 0 old", age, mem)
		}
	}
	if mem := n.memory(nil, -1, 0, 0); mem.reported {
		t.Fatalf("age -1 (the guard off) read as %+v; want no report", mem)
	}
}
