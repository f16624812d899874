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
