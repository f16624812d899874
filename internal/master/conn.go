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
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/script"
)

// A reply is a master's answer to one command: an error, an integer, an
// array or a string. go-redis's *redis.Cmd is one.
type Reply interface {
	Err() error
	Val() any // int64, string, []any of those, or nil
	Int64() (int64, error)
	Slice() ([]any, error)
	Text() (string, error)
}

// A conn is one master as the lock logic reaches it. Its methods are safe
// for concurrent use, and return when ctx ends at the latest (the library
// enforces its own deadlines on top; see fanOut).
type Conn interface {
	// script runs a script command, EVALSHA's arguments (luaScript.evalsha),
	// and runs the script's source with EVAL when the master does not know
	// it (NOSCRIPT: restarted, or its script cache flushed).
	Script(ctx context.Context, args []any) Reply
	// publish sends message on channel.
	Publish(ctx context.Context, channel, message string) error
	// publishAll sends messages[i] on channels[i], for each i, in one
	// round trip where the driver can (a pipeline), and returns the first
	// error.
	PublishAll(ctx context.Context, channels, messages []string) error
	// subscribe opens a pub/sub connection subscribed to nothing yet.
	Subscribe() Subscription
	// cluster reports whether the master is a Redis Cluster, whose scripts
	// may only touch one hash slot, and whose script PUBLISH counts only
	// its own shard's subscribers.
	Cluster() bool
}

// A subscription is one pub/sub connection to a master. subscribe and
// unsubscribe calls are made one at a time, in order (waker.send); run
// delivers, in order, the master's confirmations and messages until close,
// and re-subscribes a connection that broke to the channels it had.
type Subscription interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
	Run(deliver func(SubEvent))
	Close() error
}

// A subEvent is what a subscription delivers: a confirmation that channel
// is subscribed (or unsubscribed), or a message on it.
type SubEvent struct {
	Kind    subKind
	Channel string
	Payload string // a message's
}

type subKind int

const (
	SubConfirmed subKind = iota
	subEnded
	SubMessage
)

// goRedis is a conn over a go-redis v9 client: plain, Sentinel-managed,
// cluster or ring. Batching (pipe.go) is go-redis's too: it sends a master's
// queued requests as one go-redis pipeline.
type GoRedis struct{ C redis.UniversalClient }

func (g GoRedis) Script(ctx context.Context, args []any) Reply { return Run(ctx, g.C, args) }

func (g GoRedis) Publish(ctx context.Context, channel, message string) error {
	if g.Cluster() { // a shard channel (shardedChannel)
		return g.C.SPublish(ctx, channel, message).Err()
	}
	return g.C.Publish(ctx, channel, message).Err()
}

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

func (g GoRedis) Subscribe() Subscription {
	if cc, ok := g.C.(*redis.ClusterClient); ok {
		return newShardSubs(cc)
	}
	return goRedisSub{g.C.Subscribe(context.Background())}
}

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

// run reads the subscription's messages itself, until the PubSub is
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
// ends the read, and go-redis reconnects and subscribes again (an adversary
// found the waiters of such a Client deaf for 30 s without this check,
// against 2.5 s with go-redis's own health check, which pings alike).
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

// shardSubs subscribes to shard channels (SSUBSCRIBE) on a Redis Cluster:
// one go-redis PubSub per hash slot of the channels wanted. A PubSub is
// bound to the node of the first channel it subscribed, and when its
// connection breaks go-redis subscribes all of its channels again with one
// SSUBSCRIBE, which a master refuses (CROSSSLOT) unless they share a slot:
// so one slot per PubSub.
//
// go-redis follows no MOVED on a PubSub: a subscription sent to a master
// that no longer serves the slot (the cluster client's view was out of
// date, the slot moved twice) is refused and never confirmed, and a slot
// that moves away ends its channels' subscriptions (the server sends
// SUNSUBSCRIBE). So the confirmations are the truth: every channel asked
// for must be confirmed within confirmWithin, or audit replaces the slot's
// PubSub with a new one on the master the cluster client names then
// (asking it to reload its view), again and again, with a growing pause,
// until the master confirms.
type shardSubs struct {
	c      *redis.ClusterClient
	events chan SubEvent // every PubSub's, to run
	wg     sync.WaitGroup
	stop   chan struct{} // closed by close: audit ends

	mu      sync.Mutex
	slots   map[int]*slotSub
	auditOn bool
	closed  bool
}

// slotSub is one slot's PubSub and its channels; a new one replaces it.
type slotSub struct {
	ps        *redis.PubSub
	wanted    map[string]time.Time // channel → when it was asked for on ps
	confirmed map[string]bool      // by ps's master
	rebuilds  int                  // replacements in a row without every confirmation
	next      time.Time            // not replaced before
}

const (
	confirmWithin = 500 * time.Millisecond // a subscription's confirmation is late after this
	auditEvery    = 250 * time.Millisecond
	maxRebuildGap = 10 * time.Second
)

func newShardSubs(c *redis.ClusterClient) *shardSubs {
	return &shardSubs{c: c, events: make(chan SubEvent), stop: make(chan struct{}), slots: map[int]*slotSub{}}
}

// newSlotSub makes slot's PubSub for channels and registers the goroutine
// that must then run open. Called with s.mu held.
func (s *shardSubs) newSlotSub(slot int, channels []string, rebuilds int) *slotSub {
	now := time.Now()
	ss := &slotSub{ps: s.c.SSubscribe(context.Background()), wanted: map[string]time.Time{}, confirmed: map[string]bool{}, rebuilds: rebuilds}
	for _, ch := range channels {
		ss.wanted[ch] = now
	}
	ss.next = now.Add(min(confirmWithin<<min(rebuilds, 5), maxRebuildGap))
	s.slots[slot] = ss
	s.wg.Add(1) // under mu, before close can Wait
	if !s.auditOn {
		s.auditOn = true
		s.wg.Add(1)
		go s.audit()
	}
	return ss
}

// open subscribes ss's PubSub to channels, then forwards its events until
// it closes. Its first read must come after its first SSUBSCRIBE: a PubSub
// connects to the node of the channels it is first asked for, a random one
// otherwise. It runs on a goroutine of its own: a new connection to a hung
// master takes the driver's timeouts whatever the ctx (its handshake), and
// must hold up neither the Client's other subscriptions nor audit.
func (s *shardSubs) open(ss *slotSub, slot int, channels []string) {
	ctx, cancel := context.WithTimeout(context.Background(), maxRebuildGap)
	_ = ss.ps.SSubscribe(ctx, channels...) // its confirmation, or audit, tells
	cancel()
	s.forward(ss, slot)
}

func (s *shardSubs) Subscribe(ctx context.Context, channel string) error {
	slot := script.HashSlot(channel) // the channel is in its key's slot
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return redis.ErrClosed
	}
	ss := s.slots[slot]
	if ss == nil {
		ss = s.newSlotSub(slot, []string{channel}, 0)
		s.mu.Unlock()
		go s.open(ss, slot, []string{channel})
		return nil
	}
	ss.wanted[channel] = time.Now()
	s.mu.Unlock()
	return ss.ps.SSubscribe(ctx, channel)
}

func (s *shardSubs) Unsubscribe(ctx context.Context, channel string) error {
	slot := script.HashSlot(channel)
	s.mu.Lock()
	ss := s.slots[slot]
	if ss == nil {
		s.mu.Unlock()
		return nil
	}
	delete(ss.wanted, channel)
	delete(ss.confirmed, channel)
	if len(ss.wanted) == 0 { // the slot's last: its connection goes
		delete(s.slots, slot)
		s.mu.Unlock()
		return ss.ps.Close()
	}
	s.mu.Unlock()
	return ss.ps.SUnsubscribe(ctx, channel)
}

// forward passes the events of ss's PubSub on to run, until it closes, and
// records its confirmations.
func (s *shardSubs) forward(ss *slotSub, slot int) {
	defer s.wg.Done() // newSlotSub's
	for m := range ss.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			on := m.Kind == "ssubscribe"
			s.mu.Lock()
			if _, wanted := ss.wanted[m.Channel]; wanted && s.slots[slot] == ss {
				switch {
				case on:
					ss.confirmed[m.Channel] = true
					if len(ss.confirmed) == len(ss.wanted) {
						ss.rebuilds, ss.next = 0, time.Time{}
					}
				default:
					// Ended, though wanted: the reply to an unsubscribe
					// of ours followed at once by a subscribe, whose
					// confirmation comes next, or a master that lost the
					// slot. Either way it must be confirmed again.
					delete(ss.confirmed, m.Channel)
					ss.wanted[m.Channel] = time.Now()
				}
			}
			s.mu.Unlock()
			kind := subEnded
			if on {
				kind = SubConfirmed
			}
			s.events <- SubEvent{Kind: kind, Channel: m.Channel}
		case *redis.Message:
			s.events <- SubEvent{Kind: SubMessage, Channel: m.Channel, Payload: m.Payload}
		}
	}
}

// audit replaces, every auditEvery, the PubSub of each slot whose
// channels are not all confirmed confirmWithin after they were asked for
// (a SUNSUBSCRIBE sent by a master the slot left counts as asked then).
func (s *shardSubs) audit() {
	defer s.wg.Done()
	t := time.NewTicker(auditEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		type stale struct {
			slot     int
			old      *slotSub
			channels []string
		}
		var due []stale
		s.mu.Lock()
		for slot, ss := range s.slots {
			if now.Before(ss.next) {
				continue
			}
			for ch, at := range ss.wanted {
				if !ss.confirmed[ch] && now.Sub(at) > confirmWithin {
					due = append(due, stale{slot, ss, slices.Collect(maps.Keys(ss.wanted))})
					break
				}
			}
		}
		s.mu.Unlock()
		for _, d := range due {
			s.c.ReloadState(context.Background()) // for the next round, when this one's view is old too
			s.mu.Lock()
			if s.closed || s.slots[d.slot] != d.old {
				s.mu.Unlock()
				continue
			}
			ss := s.newSlotSub(d.slot, d.channels, d.old.rebuilds+1)
			s.mu.Unlock()
			_ = d.old.ps.Close()
			go s.open(ss, d.slot, d.channels)
		}
	}
}

func (s *shardSubs) Run(deliver func(SubEvent)) {
	for e := range s.events {
		deliver(e)
	}
}

func (s *shardSubs) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
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

// runScript sends a script command alone, and again as EVAL when the
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
