package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A command that got a reply, even an error reply, is settled; one that
// timed out is not, for good.
func TestCallsSettled(t *testing.T) {
	ctx := context.Background()
	cl := Start(t, 1, Options{ClockNode: -1})
	var calls Calls
	c := cl.Clients(&redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})[0]
	c.AddHook(calls.Hook(0))
	const token = "0f3b2c5e-7c1d-4a8b-9e6f-1a2b3c4d5e6f"
	if err := c.Set(ctx, "k", token, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "INCR", "k", token).Err(); err == nil {
		t.Fatal("INCR with a stray argument succeeded")
	}
	if !calls.Settled(token, 0) {
		t.Fatal("answered commands (one with an error reply) are not settled")
	}
	if err := cl.Nodes[0].DropReplies(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.Get(short, token).Err(); err == nil {
		t.Fatal("GET with lost replies succeeded")
	}
	cl.Heal()
	if calls.Settled(token, 0) {
		t.Fatal("a command whose reply was lost counts as settled")
	}
	if !calls.Settled("11111111-2222-3333-4444-555555555555", 0) {
		t.Fatal("a token never sent is not settled")
	}
}

// A command that carries a token after another one (a hand-off: the
// holder's token, then its recipient's) is a hand-off to the second,
// recorded per node from when it was sent; the first token, or a token
// alone, is not handed anything.
func TestCallsHandedSince(t *testing.T) {
	ctx := context.Background()
	cl := Start(t, 2, Options{ClockNode: -1})
	var calls Calls
	cs := cl.Clients(&redis.Options{MaxRetries: -1})
	for i, c := range cs {
		c.AddHook(calls.Hook(i))
	}
	const holder, next = "0f3b2c5e-7c1d-4a8b-9e6f-1a2b3c4d5e6f", "11111111-2222-3333-4444-555555555555"
	before := time.Now()
	if err := cs[0].Set(ctx, "k", next, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if calls.HandedSince(next, 0, before) {
		t.Fatal("a command carrying the token alone counts as a hand-off to it")
	}
	if err := cs[1].Do(ctx, "ECHO", holder+next).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cs[1].Do(ctx, "EXISTS", holder, next).Err(); err != nil {
		t.Fatal(err)
	}
	if !calls.HandedSince(next, 1, before) {
		t.Fatal("a command carrying the token after another is not a hand-off to it")
	}
	if calls.HandedSince(next, 0, before) || calls.HandedSince(holder, 1, before) {
		t.Fatal("a hand-off counts on another node, or to the holder's token")
	}
	if calls.HandedSince(next, 1, time.Now()) {
		t.Fatal("a hand-off counts as sent after it was")
	}
}
