// The logger: WithLogger's events, built on the Observer hook.

package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// WithLogger makes the Client log to l (log/slog), which by default it
// does not:
//   - Debug: every round, with its op, key, votes and quorum, elapsed time
//     and each master's outcome and latency; every TryLock, Lock, Extend
//     and Unlock as it returns.
//   - Warn: a master starting to fail or time out (transitions only, not
//     every call; Info when it answers again), a lock lost in Do, an Extend
//     refused, a master quarantined by the restart guard, and a master
//     refusing notices (waiters fall back to polling).
//
// Keys are logged as KeyHash(key), attribute "key_hash", unless
// WithKeyAttributes is given too. Tokens are never logged. A nil l is
// ErrInvalidArgument.
func WithLogger(l *slog.Logger) Option {
	return func(cfg *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidArgument)
		}
		cfg.logger = l
		return nil
	}
}

// WithKeyAttributes makes the logger record lock keys as they are,
// attribute "key", instead of their hash. Keys can carry user data
// ("invoice:42"): opt in only where the logs may hold it.
func WithKeyAttributes() Option {
	return func(cfg *config) error {
		cfg.keyAttributes = true
		return nil
	}
}

// logObserver is the Observer that logs to l.
func logObserver(l *slog.Logger, keys bool) Observer {
	o := slogObserver{l: l, keys: keys}
	return Observer{
		Round:     o.round,
		NodeState: o.nodeState,
		Acquire: func(e AcquireEvent) {
			l.LogAttrs(ctxOf(e.Ctx), slog.LevelDebug, "redlock: "+e.Op, o.key(e.Key),
				slog.String("outcome", e.Outcome.String()), slog.Duration("wait", e.Wait), o.errAttr(e.Err))
		},
		Extend: func(e ExtendEvent) {
			level := slog.LevelDebug
			if errors.Is(e.Err, ErrNotHeld) {
				level = slog.LevelWarn
			}
			l.LogAttrs(ctxOf(e.Ctx), level, "redlock: extend", o.key(e.Key),
				slog.Duration("ttl", e.TTL), slog.Bool("refused", errors.Is(e.Err, ErrNotHeld)), o.errAttr(e.Err))
		},
		Release: func(e ReleaseEvent) {
			l.LogAttrs(ctxOf(e.Ctx), slog.LevelDebug, "redlock: unlock", o.key(e.Key),
				slog.Duration("held", e.Held), slog.Bool("handed_off", e.HandedOff), slog.Bool("remote", e.Remote), o.errAttr(e.Err))
		},
		DoEnd: func(e DoEvent) {
			if e.Lost != nil {
				l.LogAttrs(ctxOf(e.Ctx), slog.LevelWarn, "redlock: lock lost in Do", o.key(e.Key),
					slog.Duration("held", e.Held), o.errAttr(e.Lost))
			}
		},
		Quarantine: func(e QuarantineEvent) {
			l.LogAttrs(ctxOf(e.Ctx), slog.LevelWarn, "redlock: master quarantined by the restart guard: its votes do not count",
				slog.Int("node", e.Node), slog.String("addr", e.Addr), slog.String("op", e.Op), o.key(e.Key))
		},
		NoticesDegraded: func(e NoticesDegradedEvent) {
			l.LogAttrs(context.Background(), slog.LevelWarn, "redlock: master refuses notices: waiters of other Clients poll",
				slog.Int("node", e.Node), slog.String("addr", e.Addr), nodeErrAttr(e.Err))
		},
	}
}

// A slogObserver logs the events to l; without keys, it names a key by its
// hash and an error by its kind, since an error's text names the key.
type slogObserver struct {
	l    *slog.Logger
	keys bool
}

func (o slogObserver) errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	if o.keys {
		return slog.String("err", err.Error())
	}
	return slog.String("err", errorKind(err))
}

func (o slogObserver) key(k string) slog.Attr {
	if o.keys {
		return slog.String("key", k)
	}
	return slog.String("key_hash", KeyHash(k))
}

func ctxOf(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

func (o slogObserver) round(e RoundEvent) {
	ctx := ctxOf(e.Ctx)
	if !o.l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := make([]slog.Attr, 0, 6+len(e.Nodes))
	attrs = append(attrs, slog.String("op", e.Op), o.key(e.Key),
		slog.Int("votes", e.Votes), slog.Int("quorum", e.Quorum),
		slog.Bool("won", e.Won()), slog.Duration("elapsed", e.Elapsed))
	for _, n := range e.Nodes {
		na := []any{slog.String("addr", n.Addr), slog.String("outcome", n.Outcome.String()), slog.Duration("latency", n.Latency)}
		if n.Err != nil {
			na = append(na, slog.String("err", n.Err.Error()))
		}
		attrs = append(attrs, slog.Group("node"+strconv.Itoa(n.Node), na...))
	}
	o.l.LogAttrs(ctx, slog.LevelDebug, "redlock: round", attrs...)
}

func (o slogObserver) nodeState(e NodeStateEvent) {
	if e.Healthy {
		o.l.LogAttrs(context.Background(), slog.LevelInfo, "redlock: master answering again",
			slog.Int("node", e.Node), slog.String("addr", e.Addr))
		return
	}
	o.l.LogAttrs(context.Background(), slog.LevelWarn, "redlock: master failing",
		slog.Int("node", e.Node), slog.String("addr", e.Addr),
		slog.String("outcome", e.Outcome.String()), slog.String("err", e.Err.Error())) // a master's error: no key
}

// nodeErrAttr is a master's error (which names no key) as an attribute.
func nodeErrAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.String("err", err.Error())
}

// errorKind names err by the sentinels it matches, without its text
// (which names the key).
func errorKind(err error) string {
	var kinds []string
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrLockLost, "lock lost"}, {ErrNotHeld, "not held"}, {ErrNotObtained, "not obtained"},
		{ErrClosed, "closed"}, {ErrInvalidArgument, "invalid argument"},
		{ErrNodeTimeout, "node timed out"}, {ErrNodeRefused, "node refused"}, {ErrNodeQuarantined, "node quarantined"},
		{context.DeadlineExceeded, "context deadline exceeded"}, {context.Canceled, "context canceled"},
	} {
		if errors.Is(err, k.err) {
			kinds = append(kinds, k.name)
		}
	}
	if len(kinds) == 0 {
		return "error"
	}
	return strings.Join(kinds, "; ")
}
