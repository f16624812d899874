// One master's client library, behind the small interface the lock logic
// uses: run a script, publish, subscribe. go-redis v9 is the first
// implementation; another client (rueidis, valkey-go) is adapted by
// implementing conn and subscription, and nothing else.

package redlock

import (
	"context"
	"sync"
	"time"

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
	if g.cluster() { // a shard channel (shardedChannel)
		return g.c.SPublish(ctx, channel, message).Err()
	}
	return g.c.Publish(ctx, channel, message).Err()
}

func (g goRedis) subscribe() subscription {
	if cc, ok := g.c.(*redis.ClusterClient); ok {
		return newShardSubs(cc)
	}
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

// shardSubs subscribes to shard channels (SSUBSCRIBE) on a Redis Cluster:
// one go-redis PubSub per master, since a PubSub is bound to the node of
// the first channel it subscribed (and re-subscribes all of its channels
// there when its connection breaks), and a node takes SSUBSCRIBE only for
// its own slots. A slot that moves to another master ends its channels'
// subscriptions there (the server sends SUNSUBSCRIBE); a channel still
// wanted is then subscribed again on the slot's new master.
type shardSubs struct {
	c      *redis.ClusterClient
	events chan subEvent // every PubSub's, to run
	wg     sync.WaitGroup

	mu     sync.Mutex
	byAddr map[string]*redis.PubSub // per master
	where  map[string]string        // a wanted channel's master
	moving map[string]bool          // wanted channels whose slot left their master: resubscribe runs
	closed bool
}

func newShardSubs(c *redis.ClusterClient) *shardSubs {
	return &shardSubs{c: c, events: make(chan subEvent), byAddr: map[string]*redis.PubSub{}, where: map[string]string{}, moving: map[string]bool{}}
}

func (s *shardSubs) subscribe(ctx context.Context, channel string) error {
	m, err := s.c.MasterForKey(ctx, channel) // the channel is in its key's slot
	if err != nil {
		return err
	}
	addr := m.Options().Addr
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return redis.ErrClosed
	}
	s.where[channel] = addr
	ps, started := s.byAddr[addr]
	if !started {
		// Not read before its first SSUBSCRIBE: a PubSub connects to the
		// node of the channels it is first asked for, a random one when
		// a read comes first.
		ps = s.c.SSubscribe(context.Background())
		s.byAddr[addr] = ps
		s.wg.Add(1) // under mu, before close can Wait
	}
	s.mu.Unlock()
	err = ps.SSubscribe(ctx, channel)
	if !started {
		go s.forward(ps, addr)
	}
	return err
}

func (s *shardSubs) unsubscribe(ctx context.Context, channel string) error {
	s.mu.Lock()
	addr, ok := s.where[channel]
	delete(s.where, channel)
	ps := s.byAddr[addr]
	s.mu.Unlock()
	if !ok || ps == nil {
		return nil
	}
	return ps.SUnsubscribe(ctx, channel)
}

// forward passes the events of addr's PubSub on to run, until it closes.
func (s *shardSubs) forward(ps *redis.PubSub, addr string) {
	defer s.wg.Done()
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" {
				s.events <- subEvent{kind: subConfirmed, channel: m.Channel}
				continue
			}
			s.events <- subEvent{kind: subEnded, channel: m.Channel}
			s.mu.Lock()
			// Not asked for: its slot left addr. (The echo of resubscribe's
			// own SUNSUBSCRIBE finds it moving already.)
			moved := !s.closed && s.where[m.Channel] == addr && !s.moving[m.Channel]
			if moved {
				s.moving[m.Channel] = true
				s.wg.Add(1)
			}
			s.mu.Unlock()
			if moved {
				go s.resubscribe(ps, addr, m.Channel)
			}
		case *redis.Message:
			s.events <- subEvent{kind: subMessage, channel: m.Channel, payload: m.Payload}
		}
	}
}

// resubscribe subscribes channel again on the master its slot moved to,
// once the cluster client has learned of the move.
func (s *shardSubs) resubscribe(old *redis.PubSub, addr, channel string) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.moving, channel)
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = old.SUnsubscribe(ctx, channel) // forget it there: old re-subscribes its channels when it reconnects
	for wait := 10 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, time.Second) {
		s.c.ReloadState(ctx)
		m, err := s.c.MasterForKey(ctx, channel)
		s.mu.Lock()
		wanted := !s.closed && s.where[channel] == addr
		s.mu.Unlock()
		if !wanted {
			return // unsubscribed, or subscribed again, meanwhile
		}
		if err == nil && m.Options().Addr != addr {
			_ = s.subscribe(ctx, channel)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (s *shardSubs) run(deliver func(subEvent)) {
	for e := range s.events {
		deliver(e)
	}
}

func (s *shardSubs) close() error {
	s.mu.Lock()
	s.closed = true
	subs := s.byAddr
	s.byAddr = map[string]*redis.PubSub{}
	s.mu.Unlock()
	for _, ps := range subs {
		_ = ps.Close()
	}
	s.wg.Wait()
	close(s.events)
	return nil
}
