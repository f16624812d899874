package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

var bg = context.Background()

// TestShardSubsUnsubscribeThenSubscribe: a channel unsubscribed and at once
// subscribed again stays subscribed: the reply to the unsubscribe, which
// comes after, is the Client's own, not a slot that moved.
func TestShardSubsUnsubscribeThenSubscribe(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s := newShardSubs(cl.Client())
	events := make(chan driver.Event, 16)
	go s.Run(func(e driver.Event) { events <- e })
	defer s.Close()
	a, b := script.ShardedChannel("{t}a"), script.ShardedChannel("{t}b") // one slot, one PubSub
	expect := func(kind driver.EventKind, channel string) {
		t.Helper()
		select {
		case e := <-events:
			if e.Kind != kind || e.Channel != channel {
				t.Fatalf("event %+v, want kind %d on %q", e, kind, channel)
			}
		case <-time.After(redistest.Scaled(5 * time.Second)):
			t.Fatalf("no event (want kind %d on %q)", kind, channel)
		}
	}
	for _, ch := range []string{a, b} {
		if err := s.Subscribe(bg, ch); err != nil {
			t.Fatal(err)
		}
		expect(driver.Subscribed, ch)
	}
	if err := s.Unsubscribe(bg, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Subscribe(bg, a); err != nil {
		t.Fatal(err)
	}
	expect(driver.Unsubscribed, a)
	expect(driver.Subscribed, a)
	s.mu.Lock()
	confirmed := s.slots[script.HashSlot(a)].confirmed[a]
	s.mu.Unlock()
	if !confirmed {
		t.Fatal("the subscription is not recorded as confirmed")
	}
	master := cl.Masters[redistest.ShardOf(script.HashSlot(a), 3)].Client(nil)
	defer master.Close()
	if v, err := master.Do(bg, "PUBSUB", "SHARDNUMSUB", a).Slice(); err != nil || len(v) != 2 || v[1] != int64(1) {
		t.Fatalf("PUBSUB SHARDNUMSUB %s = %v (%v), want 1", a, v, err)
	}
}

// TestShardSubsOnAStaleView: a slot moved before the cluster client
// learned of it, so the first SSUBSCRIBE goes to a master that no
// longer serves the slot, which refuses it (MOVED), and go-redis follows no
// redirection on a PubSub. The subscription is unconfirmed, and audit makes
// it again where the slot is now.
func TestShardSubsOnAStaleView(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	if err := cc.Ping(bg).Err(); err != nil { // its view of the slots, before the moves
		t.Fatal(err)
	}
	ch := script.ShardedChannel("stale")
	slot := script.HashSlot(ch)
	home := redistest.ShardOf(slot, 3)
	cl.MigrateSlot(slot, (home+1)%3)
	s := newShardSubs(cc)
	go s.Run(func(driver.Event) {})
	defer s.Close()
	if err := s.Subscribe(bg, ch); err != nil {
		t.Fatal(err)
	}
	owner := cl.Masters[(home+1)%3].Client(nil)
	defer owner.Close()
	redistest.Within(t, redistest.Scaled(10*time.Second), "the subscription on the slot's master", func() bool {
		for {
			v, err := owner.Do(bg, "PUBSUB", "SHARDNUMSUB", ch).Slice()
			if err == nil && len(v) == 2 && v[1] == int64(1) {
				return true
			}
			time.Sleep(10 * time.Millisecond) // no signal for a subscription made elsewhere
		}
	})
}
