package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
)

// A foreign client library, as an adapter would bring it: its own
// subscription type, its own Topology (none: a node known by nothing but
// the network). It talks to the masters through go-redis underneath only
// because no other client is in this module's graph; the lock logic sees
// nothing but driver.Conn.
type foreignConn struct {
	inner                    driver.Conn
	commands, subscriptions  atomic.Int64
	pipelines, pipelinedCmds atomic.Int64
}

func (f *foreignConn) Do(ctx context.Context, args ...any) driver.Reply {
	f.commands.Add(1)
	r := f.inner.Do(ctx, args...)
	return driver.Reply{Val: r.Val, Err: r.Err}
}

func (f *foreignConn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Reply {
	f.pipelines.Add(1)
	f.pipelinedCmds.Add(int64(len(cmds)))
	return f.inner.DoMulti(ctx, cmds...)
}

func (f *foreignConn) Subscribe() driver.Subscription {
	f.subscriptions.Add(1)
	return foreignSub{f.inner.Subscribe()}
}

func (f *foreignConn) Topology() driver.Topology { return driver.Topology{} }

// foreignSub hands the waker its events one at a time, as an adapter's
// own subscription would.
type foreignSub struct{ inner driver.Subscription }

func (s foreignSub) Subscribe(ctx context.Context, ch string) error {
	return s.inner.Subscribe(ctx, ch)
}
func (s foreignSub) Unsubscribe(ctx context.Context, ch string) error {
	return s.inner.Unsubscribe(ctx, ch)
}
func (s foreignSub) Run(deliver func(driver.Event)) { s.inner.Run(deliver) }
func (s foreignSub) Close() error                   { return s.inner.Close() }

// The lock logic needs nothing of a master's client but driver.Conn: with
// every node behind a foreign adapter, every call works, notices and
// batches included.
func TestEveryCallThroughAnotherClientsAdapter(t *testing.T) {
	r := startReal(t, 5)
	adapters := make([]*foreignConn, len(r.clients))
	conns := make([]driver.Conn, len(r.clients))
	for i, rc := range r.clients {
		adapters[i] = &foreignConn{inner: goredis.New(rc)}
		conns[i] = adapters[i]
	}
	c, err := NewFromDrivers(conns, WithRetryDelay(scaled(10*time.Second), scaled(10*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
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
		if a.commands.Load()+a.pipelinedCmds.Load() == 0 || a.subscriptions.Load() == 0 {
			t.Fatalf("node %d: %d commands, %d pipelined and %d subscriptions through the adapter",
				i, a.commands.Load(), a.pipelinedCmds.Load(), a.subscriptions.Load())
		}
	}
	if n := c.nodes[0].addr; n != "node[0]" {
		t.Fatalf("a node whose Topology names nothing goes by %q, want node[0]", n)
	}
}

// A node whose adapter is a nil pointer is refused, as a nil go-redis
// client is.
func TestNewFromDriversRefusesNilNodes(t *testing.T) {
	m := newMinis(t, 3, nil)
	var typedNil *foreignConn
	for _, nodes := range [][]driver.Conn{
		nil,
		{goredis.New(m.clients[0]), nil, goredis.New(m.clients[2])},
		{goredis.New(m.clients[0]), typedNil, goredis.New(m.clients[2])},
	} {
		_, err := NewFromDrivers(nodes)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("NewFromDrivers(%v) = %v, want ErrInvalidArgument", nodes, err)
		}
		if strings.Contains(err.Error(), "panicked") { // refused before any use, not caught in one
			t.Fatalf("NewFromDrivers(%v) = %v, want it refused before the driver runs", nodes, err)
		}
	}
}
