// One master's client library, behind the small interface the lock logic
// uses: run a script, publish, subscribe. go-redis v9 is the first
// implementation; another client (rueidis, valkey-go) is adapted by
// implementing conn and subscription, and nothing else.

package redlock

import (
	"context"
	"maps"
	"slices"
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
// one go-redis PubSub per hash slot of the channels wanted. A PubSub is
// bound to the node of the first channel it subscribed, and when its
// connection breaks go-redis subscribes all of its channels again with one
// SSUBSCRIBE, which a master refuses (CROSSSLOT) unless they share a slot:
// so one slot per PubSub. A slot that moves to another master ends its
// channels' subscriptions there (the server sends SUNSUBSCRIBE); the slot's
// channels are then subscribed again on a new PubSub, which connects to
// the slot's new master once the cluster client has learned of the move.
type shardSubs struct {
	c      *redis.ClusterClient
	events chan subEvent // every PubSub's, to run
	wg     sync.WaitGroup

	mu     sync.Mutex
	slots  map[int]*slotSub
	closed bool
}

// slotSub is one slot's PubSub and its channels.
type slotSub struct {
	ps       *redis.PubSub
	addr     string          // the master it was made for
	channels map[string]bool // wanted
	unsubs   map[string]int  // SUNSUBSCRIBEs sent whose replies are still to come
	moving   bool            // its slot left addr: resubscribe runs
}

func newShardSubs(c *redis.ClusterClient) *shardSubs {
	return &shardSubs{c: c, events: make(chan subEvent), slots: map[int]*slotSub{}}
}

// newSlotSub makes a PubSub for slot, on the master addr, and subscribes
// it to channels; its events are forwarded from then on. Called with s.mu
// held; the SSUBSCRIBE goes out without it (started).
func (s *shardSubs) newSlotSub(slot int, addr string, channels map[string]bool) (ss *slotSub, started func(ctx context.Context) error) {
	ss = &slotSub{ps: s.c.SSubscribe(context.Background()), addr: addr, channels: channels, unsubs: map[string]int{}}
	s.slots[slot] = ss
	s.wg.Add(1) // under mu, before close can Wait
	return ss, func(ctx context.Context) error {
		// Before its first read: a PubSub connects to the node of the
		// channels it is first asked for, a random one when a read comes
		// first.
		var err error
		if len(channels) > 0 {
			err = ss.ps.SSubscribe(ctx, slices.Collect(maps.Keys(channels))...)
		}
		go s.forward(ss, slot)
		return err
	}
}

func (s *shardSubs) subscribe(ctx context.Context, channel string) error {
	m, err := s.c.MasterForKey(ctx, channel) // the channel is in its key's slot
	if err != nil {
		return err
	}
	slot := hashSlot(channel)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return redis.ErrClosed
	}
	ss := s.slots[slot]
	if ss == nil {
		_, start := s.newSlotSub(slot, m.Options().Addr, map[string]bool{channel: true})
		s.mu.Unlock()
		return start(ctx)
	}
	ss.channels[channel] = true
	moving := ss.moving
	s.mu.Unlock()
	if moving {
		return nil // resubscribe subscribes it with the rest
	}
	return ss.ps.SSubscribe(ctx, channel)
}

func (s *shardSubs) unsubscribe(ctx context.Context, channel string) error {
	slot := hashSlot(channel)
	s.mu.Lock()
	ss := s.slots[slot]
	if ss == nil || !ss.channels[channel] {
		s.mu.Unlock()
		return nil
	}
	delete(ss.channels, channel)
	if ss.moving {
		s.mu.Unlock()
		return nil // not subscribed again
	}
	if len(ss.channels) == 0 { // the slot's last: its connection goes
		delete(s.slots, slot)
		s.mu.Unlock()
		return ss.ps.Close()
	}
	ss.unsubs[channel]++
	s.mu.Unlock()
	return ss.ps.SUnsubscribe(ctx, channel)
}

// forward passes the events of slot's PubSub ss on to run, until it closes.
func (s *shardSubs) forward(ss *slotSub, slot int) {
	defer s.wg.Done()
	for m := range ss.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" {
				s.events <- subEvent{kind: subConfirmed, channel: m.Channel}
				continue
			}
			s.events <- subEvent{kind: subEnded, channel: m.Channel}
			s.mu.Lock()
			moved := false
			switch {
			case s.closed || s.slots[slot] != ss: // replaced: its events mean nothing more
			case ss.unsubs[m.Channel] > 0: // the reply to an unsubscribe of ours
				if ss.unsubs[m.Channel]--; ss.unsubs[m.Channel] == 0 {
					delete(ss.unsubs, m.Channel)
				}
			case ss.channels[m.Channel] && !ss.moving: // not asked for: the slot left addr
				ss.moving, moved = true, true
				s.wg.Add(1)
			}
			s.mu.Unlock()
			if moved {
				go s.resubscribe(ss, slot, m.Channel)
			}
		case *redis.Message:
			s.events <- subEvent{kind: subMessage, channel: m.Channel, payload: m.Payload}
		}
	}
}

// resubscribe replaces old, whose slot left its master, with a new PubSub
// for the slot's channels, once the cluster client names another master
// for the slot (or after ten seconds, whichever it names then).
func (s *shardSubs) resubscribe(old *slotSub, slot int, channel string) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := old.addr
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		s.c.ReloadState(ctx)
		m, err := s.c.MasterForKey(ctx, channel)
		if err == nil {
			addr = m.Options().Addr
		}
		if addr != old.addr || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	s.mu.Lock()
	if s.closed || s.slots[slot] != old {
		s.mu.Unlock()
		return
	}
	delete(s.slots, slot)
	var start func(context.Context) error
	if len(old.channels) > 0 {
		_, start = s.newSlotSub(slot, addr, old.channels)
	}
	s.mu.Unlock()
	_ = old.ps.Close()
	if start != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = start(sctx)
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
	subs := s.slots
	s.slots = map[int]*slotSub{}
	s.mu.Unlock()
	for _, ss := range subs {
		_ = ss.ps.Close()
	}
	s.wg.Wait()
	close(s.events)
	return nil
}
