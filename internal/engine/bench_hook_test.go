package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/script"

	"github.com/redis/go-redis/v9"
)

// instantNode is a go-redis hook that answers the library's scripts
// itself, at once, without a network: a master that always grants the
// lock and the release. It makes a benchmark of the client's own CPU per
// TryLock+Unlock, without the noise of five servers on two cores.
type instantNode struct{}

func (instantNode) DialHook(redis.DialHook) redis.DialHook {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("instantNode: no network")
	}
}

func (instantNode) answer(cmd redis.Cmder) {
	c, ok := cmd.(*redis.Cmd)
	args := cmd.Args()
	if !ok || len(args) < 2 || (args[0] != "evalsha" && args[0] != "eval") {
		cmd.SetErr(fmt.Errorf("instantNode: %v not supported", args))
		return
	}
	called := args[1]
	if args[0] == "eval" { // a batch's first call of the script (pipe.withSources)
		called = nil
		for sha, s := range script.BySHA {
			if s.Source == args[1] {
				called = sha
			}
		}
	}
	switch called {
	case script.Acquire.SHA:
		c.SetVal([]any{int64(1), int64(-1), int64(0), int64(0)}) // yes; the guard is off
	case script.Release.SHA:
		c.SetVal(int64(1)) // deleted, nobody listening
	default:
		cmd.SetErr(fmt.Errorf("instantNode: script %v not supported", args[1]))
	}
}

func (h instantNode) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		h.answer(cmd)
		return cmd.Err()
	}
}

func (h instantNode) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.answer(c)
		}
		return nil
	}
}

// instantNodes returns five instantNode masters.
func instantNodes() []redis.UniversalClient {
	var nodes []redis.UniversalClient
	for i := range 5 {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("instant-%d:6379", i), MaxRetries: -1})
		c.AddHook(instantNode{})
		nodes = append(nodes, c)
	}
	return nodes
}

func benchInstant(b *testing.B, opts ...Option) {
	c, err := New(instantNodes(), append([]Option{WithRestartGuard(0), WithoutNotices()}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.TryLock(bg, "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryLockUnlockInstant: TryLock+Unlock on five instantNode
// masters, the client's CPU alone, with no Observer. Compare it across
// commits with benchstat: this is how the cost of the Observer hook when
// unused was measured (see the README's Observability section).
func BenchmarkTryLockUnlockInstant(b *testing.B) { benchInstant(b) }

// BenchmarkTryLockUnlockInstantObserved: the same with an Observer whose
// every function counts its events, and with a logger at Info (the
// per-round Debug records dropped): what observing costs, against
// BenchmarkTryLockUnlockInstant in the same run.
func BenchmarkTryLockUnlockInstantObserved(b *testing.B) {
	var events atomic.Int64
	count := func() { events.Add(1) }
	counting := Observer{
		Start: func(ctx context.Context, _, _ string) context.Context {
			count()
			return ctx
		},
		Round:     func(RoundEvent) { count() },
		NodeReply: func(NodeReplyEvent) { count() },
		NodeState: func(NodeStateEvent) { count() },
		Acquire:   func(AcquireEvent) { count() },
		Release:   func(ReleaseEvent) { count() },
	}
	info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b.Run("counting", func(b *testing.B) { benchInstant(b, WithObserver(counting)) })
	b.Run("logger-info", func(b *testing.B) { benchInstant(b, WithLogger(info)) })
}
