// Inspection: what the masters say of a key at one moment, read-only
// (Client.Inspect, Lock.Held).

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
	"github.com/redlock-go/redlock/internal/workers"
)

// An Inspection is what the masters said of a key during one round of
// Client.Inspect. It is a snapshot: by the time it is read, the key may
// have expired, been released or been taken. Use it to watch and to
// debug, never to decide whether to act on what a lock protects; only a
// Lock you hold, within its Until, says that.
//
// An Inspection prints (fmt, with any verb; log/slog, with any handler) as
// its exported fields, never as the values the masters hold: HoldingFor is
// the only way to compare them with a token.
type Inspection struct {
	Key     string
	Masters int // how many masters the Client has
	Quorum  int // a majority of them
	// Answered is how many masters answered; the others are in Failed.
	Answered int
	// Holding is how many of those that answered hold the key, with any
	// token (or a value that is no token: a key of another kind blocks a
	// lock as well).
	Holding int
	// MinTTL and MaxTTL are the smallest and largest TTL left on the
	// holding masters, as each reported it; 0 when none holds the key. A
	// key without an expiry (set by something other than this library)
	// counts as -1.
	MinTTL, MaxTTL time.Duration
	// Failed lists the masters that did not answer before their deadline,
	// or answered with an error.
	Failed []*NodeError

	values []string // per master, the key's value where it answered and holds a token
}

// HoldingFor returns how many masters that answered hold the key for token, a
// Lock's Token(): Holding, counted for one token; 0 for "". It is a count,
// not a verdict: a lock is held by token only with a majority (Quorum) of
// them, and only within its Until; see Lock.Held.
func (i Inspection) HoldingFor(token string) int {
	if token == "" {
		return 0
	}
	n := 0
	for _, v := range i.values {
		if v == token { // lua/token.lua's ours
			n++
		}
	}
	return n
}

// Inspect asks every master, in parallel and under the per-node deadline
// (WithNodeTimeout, or DefaultMaxNodeTimeout), what key holds: how many
// hold it, the TTLs left there, and, with HoldingFor, how many hold it for
// a given token. It changes nothing on the masters, and waits for every master
// until its deadline (not only for a majority), so that the answer is as
// complete as the masters allow.
//
// The Inspection is a snapshot; see its documentation. Inspect returns it
// with a nil error when a majority of the masters answered; otherwise it
// returns it all the same, with an error matching ErrNotObtained and
// carrying a *QuorumError, since fewer than a majority tell little. Bad
// input returns an error matching ErrInvalidArgument, and after Close an
// error matching ErrClosed.
func (c *Client) Inspect(ctx context.Context, key string) (Inspection, error) {
	if err := c.usable(); err != nil {
		return Inspection{}, err
	}
	if ctx == nil {
		return Inspection{}, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if key == "" {
		return Inspection{}, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if err := c.enter(); err != nil {
		return Inspection{}, err
	}
	defer c.bg.Done()
	timeout := DefaultMaxNodeTimeout
	if c.cfg.nodeTimeout > 0 {
		timeout = c.cfg.nodeTimeout
	}
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx, start.Add(timeout))
	defer cancel()

	replies := make(chan inspectReply, len(c.nodes)) // buffered: a late master never blocks
	for i, n := range c.nodes {
		c.bg.Add(1)
		c.workers.Run(workers.Func(func() {
			defer c.bg.Done()
			v, pttl, err := n.inspect(rctx, key)
			replies <- inspectReply{node: i, value: v, pttl: pttl, err: err, at: time.Now()}
		}))
	}
	in := Inspection{Key: key, Masters: len(c.nodes), Quorum: c.quorum, values: make([]string, len(c.nodes))}
	in.collect(ctx, rctx, c.nodes, start, replies)
	if in.Answered < c.quorum {
		qe := &QuorumError{Op: "inspect", Key: key, Quorum: c.quorum, Votes: in.Answered,
			Elapsed: time.Since(start), Nodes: in.Failed, outcome: ErrNotObtained, nodes: len(c.nodes)}
		return in, withCtx(ctx, qe)
	}
	return in, nil
}

// An inspectReply is one master's answer to Inspect.
type inspectReply struct {
	node  int
	value string
	pttl  int64
	err   error
	at    time.Time
}

// collect reads the masters' replies into in until each answered or rctx
// ended (ctx is the caller's, which tells why), counting the failures from
// start.
func (i *Inspection) collect(ctx, rctx context.Context, nodes []*node, start time.Time, replies <-chan inspectReply) {
	pending := make([]bool, len(nodes))
	for i := range pending {
		pending[i] = true
	}
	fail := func(node int, err error, at time.Time) {
		i.Failed = append(i.Failed, &NodeError{Node: node, Addr: nodes[node].addr, Latency: at.Sub(start), Err: err})
	}
	for left := len(nodes); left > 0; left-- {
		var r inspectReply
		select {
		case r = <-replies:
		case <-rctx.Done():
			select {
			case r = <-replies: // an answer already in beats the deadline
			default:
				err := ErrNodeTimeout
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				for i, p := range pending {
					if p {
						fail(i, err, time.Now())
					}
				}
				return
			}
		}
		pending[r.node] = false
		if r.err != nil {
			if errors.Is(r.err, context.DeadlineExceeded) && ctx.Err() == nil {
				r.err = fmt.Errorf("%w (%w)", ErrNodeTimeout, r.err)
			}
			fail(r.node, r.err, r.at)
			continue
		}
		i.count(r)
	}
}

// count adds a master's answer to in: absent, or holding a value for a
// TTL (-1: none).
func (i *Inspection) count(r inspectReply) {
	i.Answered++
	if r.pttl == -2 {
		return // absent
	}
	i.Holding++
	i.values[r.node] = r.value
	ttl := time.Duration(r.pttl) * time.Millisecond
	if r.pttl < 0 {
		ttl = -1
	}
	if i.Holding == 1 || ttl < i.MinTTL {
		i.MinTTL = ttl
	}
	if i.Holding == 1 || ttl > i.MaxTTL {
		i.MaxTTL = ttl
	}
}

// inspect runs the inspect script on key: its value ("" when absent or
// not a string) and its PTTL.
func (n *node) inspect(ctx context.Context, key string) (value string, pttl int64, err error) {
	vals, err := n.eval(ctx, nil, master.LateSend{}, script.Inspect.Evalsha(1, key)).Slice()
	if err != nil {
		return "", 0, err
	}
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("redlock: inspect: unexpected reply %v", vals)
	}
	value, _ = vals[0].(string)
	pttl, ok := vals[1].(int64)
	if !ok {
		return "", 0, fmt.Errorf("redlock: inspect: unexpected PTTL %v", vals[1])
	}
	return value, pttl, nil
}

// Held asks the masters whether the lock is still held (an Inspect round
// per key): true when its validity has not ended and, for each of its keys,
// a majority of the masters answered that they hold its token. Like Inspect, it is a snapshot for
// watching and debugging: Until, Done and Extend are how a holder knows
// it may act. It returns false and the error when Inspect could not reach
// a majority; false and nil for a nil *Lock.
func (l *Lock) Held(ctx context.Context) (bool, error) {
	if l == nil || l.c == nil {
		return false, nil
	}
	for _, k := range l.Keys() { // a multi-key lock: every key
		in, err := l.c.Inspect(ctx, k)
		if err != nil {
			return false, err
		}
		if in.HoldingFor(l.token) < in.Quorum {
			return false, nil
		}
	}
	return time.Now().Before(l.Until()), nil
}

// String describes the inspection: its key, masters, quorum, how many
// answered and hold the key, the TTLs left and the masters that failed.
// String never includes a token, nor any value a master holds.
func (i Inspection) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock.Inspection{key: %s, masters: %d, quorum: %d, answered: %d, holding: %d, min_ttl: %v, max_ttl: %v",
		strconv.Quote(i.Key), i.Masters, i.Quorum, i.Answered, i.Holding, i.MinTTL, i.MaxTTL)
	if len(i.Failed) > 0 {
		b.WriteString(", failed: [")
		for n, e := range i.Failed {
			if n > 0 {
				b.WriteString("; ")
			}
			b.WriteString(e.Error())
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return b.String()
}

// Format prints the inspection as String does, for every verb (%v, %+v,
// %#v, %s, %q, %x, ...): never the values the masters hold.
func (i Inspection) Format(f fmt.State, verb rune) {
	formatSafe(f, verb, "redlock.Inspection", i.String())
}

// LogValue is the inspection for log/slog: a group of "key", "masters",
// "quorum", "answered", "holding", "min_ttl", "max_ttl" and, when masters
// failed, "failed", their errors as in String. It never includes a token,
// nor any value a master holds.
func (i Inspection) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("key", i.Key), slog.Int("masters", i.Masters), slog.Int("quorum", i.Quorum),
		slog.Int("answered", i.Answered), slog.Int("holding", i.Holding),
		slog.Duration("min_ttl", i.MinTTL), slog.Duration("max_ttl", i.MaxTTL)}
	if len(i.Failed) > 0 {
		failed := make([]string, len(i.Failed))
		for n, e := range i.Failed {
			failed[n] = e.Error()
		}
		attrs = append(attrs, slog.Any("failed", failed))
	}
	return slog.GroupValue(attrs...)
}
