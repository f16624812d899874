// Calls: which nodes answered every command that carried a token.

package chaos

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Calls records, for every token (a UUID argument) a command carried,
// whether each node answered every such command. A command that got no
// answer — still in flight, or ended by a timeout, a cancelled context or a
// broken connection — may still run at its node later, out of order with
// the client's next commands: Redis has no way to take it back. A test uses
// Settled to draw conclusions only from nodes where nothing of the kind is
// pending. Install it with each node client's AddHook(c.Hook(i)).
type Calls struct {
	m sync.Map // token → *tokenCalls
}

type tokenCalls struct {
	mu      sync.Mutex
	pending map[int]int       // node → commands in flight
	lost    map[int]bool      // node → a command went unanswered
	handed  map[int]time.Time // node → when a hand-off to the token was last sent there
}

// Hook returns the go-redis hook for node i's client.
func (c *Calls) Hook(node int) redis.Hook { return callsHook{c, node} }

// Settled reports whether node answered every command that carried token
// so far (a Redis error reply is an answer).
func (c *Calls) Settled(token string, node int) bool {
	v, ok := c.m.Load(token)
	if !ok {
		return true
	}
	tc := v.(*tokenCalls)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.pending[node] == 0 && !tc.lost[node]
}

// HandedSince reports whether a command that hands the key to token (a
// hand-off: the token is a later UUID argument than the holder's) was sent
// to node at or after t.
func (c *Calls) HandedSince(token string, node int, t time.Time) bool {
	v, ok := c.m.Load(token)
	if !ok {
		return false
	}
	tc := v.(*tokenCalls)
	tc.mu.Lock()
	defer tc.mu.Unlock()
	at, ok := tc.handed[node]
	return ok && !at.Before(t)
}

// tokens returns the calls of every token among args, and records on node
// a hand-off to each token after the first.
func (c *Calls) tokens(node int, args []any) []*tokenCalls {
	var out []*tokenCalls
	for _, a := range args {
		s, ok := a.(string)
		if !ok || len(s) != 36 {
			continue
		}
		if _, err := uuid.Parse(s); err != nil {
			continue
		}
		v, _ := c.m.LoadOrStore(s, &tokenCalls{pending: map[int]int{}, lost: map[int]bool{}, handed: map[int]time.Time{}})
		tc := v.(*tokenCalls)
		if len(out) > 0 {
			tc.mu.Lock()
			tc.handed[node] = time.Now()
			tc.mu.Unlock()
		}
		out = append(out, tc)
	}
	return out
}

type callsHook struct {
	c    *Calls
	node int
}

func (callsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h callsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.track(h.c.tokens(h.node, cmd.Args()), func() error { return next(ctx, cmd) })
	}
}

func (h callsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var tcs []*tokenCalls
		for _, cmd := range cmds {
			tcs = append(tcs, h.c.tokens(h.node, cmd.Args())...)
		}
		return h.track(tcs, func() error { return next(ctx, cmds) })
	}
}

// track counts send as pending on h's node for each of tcs while it runs,
// and marks it lost there if it got no answer.
func (h callsHook) track(tcs []*tokenCalls, send func() error) error {
	for _, tc := range tcs {
		tc.mu.Lock()
		tc.pending[h.node]++
		tc.mu.Unlock()
	}
	err := send()
	var rerr redis.Error
	answered := err == nil || errors.Is(err, redis.Nil) || (errors.As(err, &rerr) && !isNetErr(err))
	for _, tc := range tcs {
		tc.mu.Lock()
		tc.pending[h.node]--
		if !answered {
			tc.lost[h.node] = true
		}
		tc.mu.Unlock()
	}
	return err
}

// isNetErr reports an error of the connection rather than a reply.
func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
