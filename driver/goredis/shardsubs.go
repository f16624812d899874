// Shard-channel subscriptions on a Redis Cluster: one PubSub per hash
// slot, audited until every channel is confirmed where its slot is.

package goredis

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/script"
)

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
	events chan driver.Event // every PubSub's, to run
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
	return &shardSubs{c: c, events: make(chan driver.Event), stop: make(chan struct{}), slots: map[int]*slotSub{}}
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
			kind := driver.Unsubscribed
			if on {
				kind = driver.Subscribed
			}
			s.events <- driver.Event{Kind: kind, Channel: m.Channel}
		case *redis.Message:
			s.events <- driver.Event{Kind: driver.Message, Channel: m.Channel, Payload: m.Payload}
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

func (s *shardSubs) Run(deliver func(driver.Event)) {
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
