// Package master is how the library reaches one Redis master: its client
// library behind the small interface the lock logic uses (Conn: run a
// script, publish, subscribe; Reply; Subscription), and the per-master
// auto-pipelining (Pipe) that batches script calls. go-redis v9 is the
// first implementation (GoRedis); another client (rueidis, valkey-go) is
// adapted by implementing Conn and Subscription, and nothing else. It
// decides nothing about locks: it sends what it is given, under the
// deadlines it is given.
package master

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/script"
)

// A Reply is a master's answer to one command: an error, an integer, an
// array or a string. go-redis's *redis.Cmd is one.
type Reply interface {
	Err() error
	Val() any // int64, string, []any of those, or nil
	Int64() (int64, error)
	Slice() ([]any, error)
	Text() (string, error)
}

// A Conn is one master as the lock logic reaches it. Its methods are safe
// for concurrent use, and return when ctx ends at the latest (the library
// enforces its own deadlines on top; see fanOut).
type Conn interface {
	// Script runs a script command, EVALSHA's arguments (luaScript.evalsha),
	// and runs the script's source with EVAL when the master does not know
	// it (NOSCRIPT: restarted, or its script cache flushed).
	Script(ctx context.Context, args []any) Reply
	// Publish sends message on channel.
	Publish(ctx context.Context, channel, message string) error
	// PublishAll sends messages[i] on channels[i], for each i, in one
	// round trip where the driver can (a pipeline), and returns the first
	// error.
	PublishAll(ctx context.Context, channels, messages []string) error
	// Subscribe opens a pub/sub connection subscribed to nothing yet.
	Subscribe() Subscription
	// Cluster reports whether the master is a Redis Cluster, whose scripts
	// may only touch one hash slot, and whose script PUBLISH counts only
	// its own shard's subscribers.
	Cluster() bool
}

// A Subscription is one pub/sub connection to a master. subscribe and
// unsubscribe calls are made one at a time, in order (waker.send); run
// delivers, in order, the master's confirmations and messages until close,
// and re-subscribes a connection that broke to the channels it had. A
// Subscribe that fails may leave its channel out of those (go-redis
// replaces a connection that broke under the SUBSCRIBE before it adds the
// channel): the caller asks again.
type Subscription interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
	Run(deliver func(SubEvent))
	Close() error
}

// A SubEvent is what a subscription delivers: a confirmation that channel
// is subscribed (or unsubscribed), or a message on it.
type SubEvent struct {
	Kind    subKind
	Channel string
	Payload string // a message's
}

type subKind int

// The kinds of SubEvent.
const (
	SubConfirmed subKind = iota
	subEnded
	SubMessage
)

// GoRedis is a conn over a go-redis v9 client: plain, Sentinel-managed,
// cluster or ring. Batching (pipe.go) is go-redis's too: it sends a master's
// queued requests as one go-redis pipeline.
type GoRedis struct{ C redis.UniversalClient }

// Script runs a script command (see Conn).
func (g GoRedis) Script(ctx context.Context, args []any) Reply { return Run(ctx, g.C, args) }

// Publish sends message on channel: a shard channel on a Redis Cluster.
func (g GoRedis) Publish(ctx context.Context, channel, message string) error {
	if g.Cluster() { // a shard channel (shardedChannel)
		return g.C.SPublish(ctx, channel, message).Err()
	}
	return g.C.Publish(ctx, channel, message).Err()
}

// PublishAll sends messages[i] on channels[i] in one pipeline.
func (g GoRedis) PublishAll(ctx context.Context, channels, messages []string) error {
	cluster := g.Cluster()
	_, err := g.C.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ch := range channels {
			if cluster {
				p.SPublish(ctx, ch, messages[i])
			} else {
				p.Publish(ctx, ch, messages[i])
			}
		}
		return nil
	})
	return err
}

// Subscribe opens a pub/sub connection: per hash slot on a Redis Cluster.
func (g GoRedis) Subscribe() Subscription {
	if cc, ok := g.C.(*redis.ClusterClient); ok {
		return newShardSubs(cc)
	}
	return goRedisSub{g.C.Subscribe(context.Background())}
}

// Cluster reports whether the master is a Redis Cluster.
func (g GoRedis) Cluster() bool {
	_, ok := g.C.(*redis.ClusterClient)
	return ok
}

// goRedisSub is a go-redis PubSub as a subscription.
type goRedisSub struct{ ps *redis.PubSub }

func (s goRedisSub) Subscribe(ctx context.Context, channel string) error {
	return s.ps.Subscribe(ctx, channel)
}

func (s goRedisSub) Unsubscribe(ctx context.Context, channel string) error {
	return s.ps.Unsubscribe(ctx, channel)
}

// Run reads the subscription's messages itself, until the PubSub is
// closed. go-redis's ChannelWithSubscriptions would hand each one through
// two more goroutines (its reader's, and a health check's woken per
// message) and a timer: three wake-ups per notice where one will do, and a
// hand-off sends five notices to every Client that watches the key, all at
// the moment its round's replies come in. A broken connection is handled
// as there: go-redis reconnects, and subscribes again to the channels,
// when Receive fails on it; after two failures in a row, the loop waits
// 100 ms between attempts. The health check stays, off the message path
// (check).
func (s goRedisSub) Run(deliver func(SubEvent)) {
	var heard atomic.Bool
	ctx, stop := context.WithCancel(context.Background()) // ends the check, and a PING on its way
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		s.check(ctx, &heard)
	}()
	defer checker.Wait()
	defer stop()
	var errs int
	for {
		m, err := s.ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			if errs > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			errs++
			continue
		}
		errs = 0
		heard.Store(true)
		switch m := m.(type) {
		case *redis.Subscription:
			k := subEnded
			if m.Kind == "subscribe" {
				k = SubConfirmed
			}
			deliver(SubEvent{Kind: k, Channel: m.Channel})
		case *redis.Message:
			deliver(SubEvent{Kind: SubMessage, Channel: m.Channel, Payload: m.Payload})
		}
	}
}

// subscriptionCheck is how often a subscription's connection is looked
// at: one that carried nothing since the last look is sent a PING. The
// PING's reply counts as traffic, so an idle connection is pinged every
// other look (3 s, as by go-redis's own check).
const subscriptionCheck = 1500 * time.Millisecond

// check sends a PING on the subscription's connection when nothing came on
// it for a subscriptionCheck (heard is set on each message, and cleared
// here), until ctx ends. A master that forgot the connection without a
// word (a rebooted host, a NAT or load balancer that dropped the flow)
// leaves it half-open: a blocked read hears nothing, for as long as TCP
// keep-alive takes (30 s by go-redis's default; never without it), and the
// Client's notices from that master with it. The PING draws the reset that
// ends the read, and go-redis reconnects and subscribes again: the
// Client's waiters are deaf for a few seconds at most, as with go-redis's
// own health check, which pings alike.
func (s goRedisSub) check(ctx context.Context, heard *atomic.Bool) {
	t := time.NewTicker(subscriptionCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if heard.Swap(false) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, subscriptionCheck)
		_ = s.ps.Ping(pctx) // its reply is a message too
		cancel()
	}
}

func (s goRedisSub) Close() error { return s.ps.Close() }

// Run sends a script command alone, and again as EVAL when the
// master does not know the script (NOSCRIPT), as go-redis's Script.Run
// does.
func Run(ctx context.Context, c redis.UniversalClient, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	if isNoScript(cmd.Err()) {
		if eval := script.AsEval(args); eval != nil {
			cmd = redis.NewCmd(ctx, eval...)
			_ = c.Process(ctx, cmd)
		}
	}
	return cmd
}

// IsNoPerm reports whether err is a master's refusal for want of ACL rights
// (a channel, for PUBLISH or SUBSCRIBE).
func IsNoPerm(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOPERM") }
