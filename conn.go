// One master's client library, behind the small interface the lock logic
// uses: run a script, publish, subscribe. go-redis v9 is the first
// implementation; another client (rueidis, valkey-go) is adapted by
// implementing conn and subscription, and nothing else.

package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A reply is a master's answer to one command: an error, an integer, an
// array or a string. go-redis's *redis.Cmd is one.
type reply interface {
	Err() error
	Val() any // int64, string, []any of those, or nil
	Int64() (int64, error)
	Slice() ([]any, error)
	Text() (string, error)
}

// A conn is one master as the lock logic reaches it. Its methods are safe
// for concurrent use, and return when ctx ends at the latest (the library
// enforces its own deadlines on top; see fanOut).
type conn interface {
	// script runs a script command, EVALSHA's arguments (luaScript.evalsha),
	// and runs the script's source with EVAL when the master does not know
	// it (NOSCRIPT: restarted, or its script cache flushed).
	script(ctx context.Context, args []any) reply
	// publish sends message on channel.
	publish(ctx context.Context, channel, message string) error
	// subscribe opens a pub/sub connection subscribed to nothing yet.
	subscribe() subscription
	// cluster reports whether the master is a Redis Cluster, whose scripts
	// may only touch one hash slot, and whose script PUBLISH counts only
	// its own shard's subscribers.
	cluster() bool
}

// A subscription is one pub/sub connection to a master. subscribe and
// unsubscribe calls are made one at a time, in order (waker.send); run
// delivers, in order, the master's confirmations and messages until close,
// and re-subscribes a connection that broke to the channels it had.
type subscription interface {
	subscribe(ctx context.Context, channel string) error
	unsubscribe(ctx context.Context, channel string) error
	run(deliver func(subEvent))
	close() error
}

// A subEvent is what a subscription delivers: a confirmation that channel
// is subscribed (or unsubscribed), or a message on it.
type subEvent struct {
	kind    subKind
	channel string
	payload string // a message's
}

type subKind int

const (
	subConfirmed subKind = iota
	subEnded
	subMessage
)

// goRedis is a conn over a go-redis v9 client: plain, Sentinel-managed,
// cluster or ring. Batching (pipe.go) is go-redis's too: it sends a master's
// queued requests as one go-redis pipeline.
type goRedis struct{ c redis.UniversalClient }

func (g goRedis) script(ctx context.Context, args []any) reply { return runScript(ctx, g.c, args) }

func (g goRedis) publish(ctx context.Context, channel, message string) error {
	return g.c.Publish(ctx, channel, message).Err()
}

func (g goRedis) subscribe() subscription {
	return goRedisSub{g.c.Subscribe(context.Background())}
}

func (g goRedis) cluster() bool {
	_, ok := g.c.(*redis.ClusterClient)
	return ok
}

// goRedisSub is a go-redis PubSub as a subscription.
type goRedisSub struct{ ps *redis.PubSub }

func (s goRedisSub) subscribe(ctx context.Context, channel string) error {
	return s.ps.Subscribe(ctx, channel)
}

func (s goRedisSub) unsubscribe(ctx context.Context, channel string) error {
	return s.ps.Unsubscribe(ctx, channel)
}

func (s goRedisSub) run(deliver func(subEvent)) {
	for m := range s.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			k := subEnded
			if m.Kind == "subscribe" {
				k = subConfirmed
			}
			deliver(subEvent{kind: k, channel: m.Channel})
		case *redis.Message:
			deliver(subEvent{kind: subMessage, channel: m.Channel, payload: m.Payload})
		}
	}
}

func (s goRedisSub) close() error { return s.ps.Close() }
