package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/master"
)

// A foreign client library, as an adapter would bring it: its own reply
// type, its own subscription type. It talks to the masters through go-redis
// underneath only because no other client is in this module's graph; the
// lock logic sees none of go-redis's types.
type foreignConn struct {
	inner                             master.Conn
	scripts, publishes, subscriptions atomic.Int64
}

func (f *foreignConn) Script(ctx context.Context, args []any) master.Reply {
	f.scripts.Add(1)
	r := f.inner.Script(ctx, args)
	return foreignReply{val: r.Val(), err: r.Err()}
}

func (f *foreignConn) Publish(ctx context.Context, channel, message string) error {
	f.publishes.Add(1)
	return f.inner.Publish(ctx, channel, message)
}

func (f *foreignConn) PublishAll(ctx context.Context, channels, messages []string) error {
	for i, ch := range channels {
		if err := f.Publish(ctx, ch, messages[i]); err != nil {
			return err
		}
	}
	return nil
}

func (f *foreignConn) Subscribe() master.Subscription {
	f.subscriptions.Add(1)
	return foreignSub{f.inner.Subscribe()}
}

func (f *foreignConn) Cluster() bool { return false }

// foreignReply is a reply that is not a *redis.Cmd.
type foreignReply struct {
	val any
	err error
}

func (r foreignReply) Err() error { return r.err }
func (r foreignReply) Val() any   { return r.val }

func (r foreignReply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	v, ok := r.val.(int64)
	if !ok {
		return 0, fmt.Errorf("foreign: %v is not an integer", r.val)
	}
	return v, nil
}

func (r foreignReply) Slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	v, ok := r.val.([]any)
	if !ok {
		return nil, fmt.Errorf("foreign: %v is not an array", r.val)
	}
	return v, nil
}

func (r foreignReply) Text() (string, error) {
	if r.err != nil {
		return "", r.err
	}
	v, ok := r.val.(string)
	if !ok {
		return "", fmt.Errorf("foreign: %v is not a string", r.val)
	}
	return v, nil
}

// foreignSub hands the waker its events one at a time, as an adapter's
// own subscription would.
type foreignSub struct{ inner master.Subscription }

func (s foreignSub) Subscribe(ctx context.Context, ch string) error {
	return s.inner.Subscribe(ctx, ch)
}
func (s foreignSub) Unsubscribe(ctx context.Context, ch string) error {
	return s.inner.Unsubscribe(ctx, ch)
}
func (s foreignSub) Run(deliver func(master.SubEvent)) { s.inner.Run(deliver) }
func (s foreignSub) Close() error                      { return s.inner.Close() }

// The lock logic needs nothing of a master's client but conn: with every
// node behind a foreign adapter (batching off, since batching is
// go-redis's), every call works, notices included.
func TestEveryCallThroughAnotherClientsAdapter(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithBatchLimit(1), WithRetryDelay(scaled(10*time.Second), scaled(10*time.Second)))
	adapters := make([]*foreignConn, len(c.nodes))
	for i, n := range c.nodes {
		adapters[i] = &foreignConn{inner: n.conn}
		n.conn = adapters[i]
		c.wk.Nodes[i] = adapters[i] // before the first watch subscribes
	}
	// The contended Lock in it must be woken by a notice: its backoff is
	// longer than the bound.
	exerciseEveryCall(t, c, "adapted", scaled(5*time.Second))
	l, err := c.TryLockMulti(bg, []string{"adapted:a", "adapted:b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Fence(bg); err != nil {
		t.Fatal(err)
	}
	if in, err := c.Inspect(bg, "adapted:a"); err != nil || in.HoldingFor(l.Token()) < 3 {
		t.Fatalf("Inspect = %+v, %v", in, err)
	}
	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	for i, a := range adapters {
		if a.scripts.Load() == 0 || a.subscriptions.Load() == 0 {
			t.Fatalf("node %d: %d scripts and %d subscriptions through the adapter", i, a.scripts.Load(), a.subscriptions.Load())
		}
	}
}
