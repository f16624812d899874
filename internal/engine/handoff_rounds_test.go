package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/chaos"
)

// A waiter adds up the notices of different hand-off rounds to its want
// (keyWatch.handed): a round that lost still put its token where it
// landed. That is safe because the token set there after the want's first
// announcement lives its TTL, past the validity the waiter gives its lock
// (from that announcement, less drift), and only the waiter's Client
// deletes it; a master that loses it by a restart is quarantined by the
// restart guard for longer. TestAWaiterCountsALostHandOffRoundsMaster
// stages it on real masters (an adversary review's staging): X's hand-off
// lands on master 0 only and loses (masters 1 to 4 at maxmemory), Y then
// takes masters 1 to 4, and its hand-off lands on masters 1 and 2 only
// (3 and 4 at maxmemory). The waiter takes the lock counting master 0 from
// the first round and masters 1 and 2 from the second.
//   - kept: the token is on masters 0 to 2, each expiring after the lock's
//     Until, and another Client is refused.
//   - restarted: master 0 restarts empty between the rounds, so the token is
//     on masters 1 and 2 only while the lock is valid; another Client that
//     cannot reach them gets masters 3 and 4, and master 0's vote is held
//     back (ErrNodeQuarantined), so it does not obtain the key.
func TestAWaiterCountsALostHandOffRoundsMaster(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := map[bool]string{false: "kept", true: "restarted"}[restart]
		t.Run(name, func(t *testing.T) { lostRoundCounted(t, restart) })
	}
}

func lostRoundCounted(t *testing.T, restart bool) {
	const user = "giver"
	cl := chaos.Start(t, 5, chaos.Options{ClockNode: -1, Users: []string{user + " on >pw ~* +@all &*"}})
	admin := make([]redis.UniversalClient, len(cl.Nodes))
	for i, n := range cl.Nodes {
		admin[i] = n.Admin
	}
	ageMemory(t, admin, establishedAge)
	t.Cleanup(cl.Heal)
	clients := func(user string, addrs []string) []redis.UniversalClient {
		out := make([]redis.UniversalClient, len(cl.Nodes))
		for i, n := range cl.Nodes {
			o := &redis.Options{Addr: n.Server.Addr, MaxRetries: -1, ContextTimeoutEnabled: true}
			if addrs != nil {
				o.Addr = addrs[i]
			}
			if user != "" {
				o.Username, o.Password = user, "pw"
			}
			rc := redis.NewClient(o)
			t.Cleanup(func() { _ = rc.Close() })
			out[i] = rc
		}
		return out
	}
	newClient := func(cs []redis.UniversalClient, opts ...Option) *Client {
		c, err := New(cs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x := newClient(clients(user, nil))
	y := newClient(clients("", nil))
	// The waiter makes no attempt of its own: it hears no release (X's
	// user has no channel rights on masters 1 to 4 when it unlocks).
	a := newClient(clients("", nil), WithRetryDelay(10*time.Millisecond, time.Minute))
	// The other Client reaches masters 1 and 2 through proxies it can cut.
	addrs := make([]string, len(cl.Nodes))
	proxies := make([]*chaos.Proxy, len(cl.Nodes))
	for i, n := range cl.Nodes {
		p, err := chaos.NewProxy("127.0.0.1:0", n.Server.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		proxies[i], addrs[i] = p, p.Addr()
	}
	b := newClient(clients("", addrs), WithNodeTimeout(scaled(200*time.Millisecond)))

	watching(t, x, "k")
	watching(t, y, "k")
	xl, err := x.Lock(bg, "k", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(x)
	// The waiter's TTL outlasts the whole staging, however slow: were the
	// first round's token to expire before the second round lands, the
	// waiter would confirm the lock (its validity counts from its first
	// announcement), lose, and wait on.
	res := tryLockAsync(a, "k", scaled(time.Minute))
	wantKnown(t, x, "k", 1)
	wantKnown(t, y, "k", 1)
	token := wantsOf(x, "k")[0]

	// The first round: masters 1 to 4 refuse the SET, and X's releases
	// there are silent.
	for i := 1; i < 5; i++ {
		if err := cl.Nodes[i].OutOfMemory(); err != nil {
			t.Fatal(err)
		}
		if err := cl.Nodes[i].RevokeChannels(user); err != nil {
			t.Fatal(err)
		}
	}
	if err := xl.Unlock(bg); err != nil {
		t.Fatalf("X's Unlock: %v", err)
	}
	settle(x)
	if got := cl.Values(t, "k"); got[0] != token || slices.ContainsFunc(got[1:], func(v string) bool { return v != "" }) {
		t.Fatalf("after the first round the masters hold %q; want the waiter's token on master 0 only", got)
	}
	for i := 1; i < 5; i++ {
		if err := cl.Nodes[i].RestoreMemory(); err != nil {
			t.Fatal(err)
		}
		if err := cl.Nodes[i].GrantChannels(user); err != nil {
			t.Fatal(err)
		}
	}
	var yl *Lock
	for deadline := time.Now().Add(scaled(5 * time.Second)); yl == nil; {
		if yl, err = y.TryLock(bg, "k", 30*time.Second); yl == nil && time.Now().After(deadline) {
			t.Fatalf("Y never took masters 1 to 4: %v", err)
		}
	}
	settle(y)
	if restart {
		if err := cl.Nodes[0].RestartEmpty(); err != nil {
			t.Fatal(err)
		}
	}
	// The second round: masters 3 and 4 refuse the SET.
	for _, i := range []int{3, 4} {
		if err := cl.Nodes[i].OutOfMemory(); err != nil {
			t.Fatal(err)
		}
	}
	if err := yl.Unlock(bg); err != nil {
		t.Logf("Y's Unlock (its hand-off lost): %v", err)
	}
	var got lockResult
	select {
	case got = <-res:
	case <-time.After(scaled(10 * time.Second)):
		t.Fatalf("the waiter did not take the lock; the masters hold %q", cl.Values(t, "k"))
	}
	if got.err != nil {
		t.Fatalf("the waiter's Lock: %v", got.err)
	}
	for _, i := range []int{3, 4} {
		if err := cl.Nodes[i].RestoreMemory(); err != nil {
			t.Fatal(err)
		}
	}
	settle(y)
	l := got.l
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	if l.Token() != token {
		t.Fatalf("the waiter's lock holds %.8s, want its announced token %.8s", l.Token(), token)
	}
	values, pttls := cl.Values(t, "k"), cl.PTTLs(t, "k")
	held := []int{0, 1, 2}
	if restart {
		held = held[1:]
	}
	for i, v := range values {
		on := v == token
		if on != slices.Contains(held, i) {
			t.Fatalf("with the lock valid for %v, the masters hold %q; want its token on masters %v", time.Until(l.Until()), values, held)
		}
		if on && time.Now().Add(pttls[i]).Before(l.Until()) {
			t.Fatalf("the token expires on master %d %v before the lock's Until: a vote counted there outlives the key", i, l.Until().Sub(time.Now().Add(pttls[i])))
		}
	}
	proxies[1].BlackHole()
	proxies[2].BlackHole()
	bl, err := b.TryLock(bg, "k", 5*time.Second)
	if bl != nil {
		t.Fatalf("another Client took the key (until %v) while the waiter's lock is valid until %v; masters %q", bl.Until(), l.Until(), cl.Values(t, "k"))
	}
	if restart && !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("another Client's attempt: %v; want master 0's vote held back (%v)", err, ErrNodeQuarantined)
	}
	if !time.Now().Before(l.Until()) {
		t.Fatalf("the waiter's lock ended before the other Client's attempt: the test proves nothing; raise the TTLs")
	}
}
