// Pub/sub: confirmations, delivery in order, unsubscribing, Close ending
// Run, and a subscription that outlives its connection.

package drivertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/redistest"
)

// events runs sub's Run on a goroutine of its own, and returns its events
// and a channel closed once Run returned. The subscription is closed when
// t ends, and Run must then return.
func events(t *testing.T, sub driver.Subscription) (<-chan driver.Event, <-chan struct{}) {
	t.Helper()
	evs := make(chan driver.Event, 1024)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		sub.Run(func(e driver.Event) {
			select {
			case evs <- e:
			default: // a test that stopped reading: Run must not block on it
			}
		})
	}()
	t.Cleanup(func() {
		_ = sub.Close()
		select {
		case <-ran:
		case <-time.After(redistest.Scaled(5 * time.Second)):
			t.Error("Run did not return after Close")
		}
	})
	return evs, ran
}

// expect waits for the next event, and fails t unless it is want.
func expect(t *testing.T, evs <-chan driver.Event, want driver.Event) {
	t.Helper()
	select {
	case e := <-evs:
		if e != want {
			t.Fatalf("event %+v, want %+v", e, want)
		}
	case <-time.After(redistest.Scaled(5 * time.Second)):
		t.Fatalf("no event within %v, want %+v", redistest.Scaled(5*time.Second), want)
	}
}

// numsub is how many subscribers channel has on the server c reaches.
func numsub(t *testing.T, c driver.Conn, channel string) int64 {
	t.Helper()
	v, ok := do(t, c, "pubsub", "numsub", channel).([]any)
	if !ok || len(v) != 2 {
		t.Fatalf("PUBSUB NUMSUB = %#v", v)
	}
	n, _ := v[1].(int64)
	return n
}

// pubsub: a subscription's confirmation, messages in order with their
// payloads, an unsubscription's confirmation, and no subscriber left
// after it; Close ends Run.
func (s *suite) pubsub(t *testing.T) {
	c := s.conn(t)
	sub := c.Subscribe()
	evs, ran := events(t, sub)
	const a, b = "dt:ch:a", "dt:ch:b"
	for _, ch := range []string{a, b} {
		if err := sub.Subscribe(ctx(t), ch); err != nil {
			t.Fatal(err)
		}
		expect(t, evs, driver.Event{Kind: driver.Subscribed, Channel: ch})
	}
	for i := range 3 {
		if n := do(t, c, "publish", a, fmt.Sprint("m", i)); n != int64(1) {
			t.Fatalf("PUBLISH reached %v subscribers, want 1", n)
		}
	}
	for i := range 3 {
		expect(t, evs, driver.Event{Kind: driver.Message, Channel: a, Payload: fmt.Sprint("m", i)})
	}
	do(t, c, "publish", b, "on b")
	expect(t, evs, driver.Event{Kind: driver.Message, Channel: b, Payload: "on b"})
	if err := sub.Unsubscribe(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	expect(t, evs, driver.Event{Kind: driver.Unsubscribed, Channel: a})
	if n := numsub(t, c, a); n != 0 {
		t.Fatalf("%d subscribers on %s after Unsubscribe, want 0", n, a)
	}
	do(t, c, "publish", b, "still on b")
	expect(t, evs, driver.Event{Kind: driver.Message, Channel: b, Payload: "still on b"})
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	within(t, redistest.Scaled(time.Second), "Run after Close", func() { <-ran })
}

// reconnects: a subscription whose connection the server kills (CLIENT
// KILL TYPE pubsub) connects again by itself, subscribes again to its
// channels (their confirmations come again), and delivers what is
// published after that.
func (s *suite) reconnects(t *testing.T) {
	c := s.conn(t)
	sub := c.Subscribe()
	evs, _ := events(t, sub)
	const ch = "dt:ch:kill"
	if err := sub.Subscribe(ctx(t), ch); err != nil {
		t.Fatal(err)
	}
	expect(t, evs, driver.Event{Kind: driver.Subscribed, Channel: ch})
	if n, _ := do(t, c, "client", "kill", "type", "pubsub").(int64); n < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub killed %d connections, want 1 at least", n)
	}
	expect(t, evs, driver.Event{Kind: driver.Subscribed, Channel: ch})
	do(t, c, "publish", ch, "after")
	expect(t, evs, driver.Event{Kind: driver.Message, Channel: ch, Payload: "after"})
}
