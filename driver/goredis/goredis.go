// Package goredis is the go-redis v9 adapter of package driver, the one
// redlock.New uses: a plain client, one that finds its master through Redis
// Sentinel, a Redis Cluster client and a Ring are each one node.
package goredis

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/driver"
)

// A Conn is a go-redis client as a driver.Conn. Two Conns of one client
// are equal (==). Its methods are safe for concurrent use.
type Conn struct{ c redis.UniversalClient }

// New returns c as a driver.Conn. The caller keeps c: closing it is its
// job, after the redlock Client's Close.
func New(c redis.UniversalClient) Conn { return Conn{c} }

// Wrap returns each of clients as a driver.Conn (New), and a nil client, or
// a nil pointer of a client type, as a nil driver.Conn, which redlock's
// constructors refuse (ErrInvalidArgument).
func Wrap(clients []redis.UniversalClient) []driver.Conn {
	conns := make([]driver.Conn, len(clients))
	for i, c := range clients {
		if !isNil(c) {
			conns[i] = New(c)
		}
	}
	return conns
}

// isNil reports whether c is nil or a typed nil pointer, which would panic
// on first use.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// Client returns the go-redis client c adapts.
func (c Conn) Client() redis.UniversalClient { return c.c }

// Do sends one command (see driver.Conn).
func (c Conn) Do(ctx context.Context, args ...any) driver.Reply {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.c.Process(ctx, cmd)
	return reply(cmd)
}

// DoMulti sends cmds as one go-redis pipeline: on a Cluster client, one
// per master, each command to the master of its keys.
func (c Conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Reply {
	if len(cmds) == 0 {
		return nil
	}
	pl := c.c.Pipeline()
	rcs := make([]*redis.Cmd, len(cmds))
	for i, args := range cmds {
		rcs[i] = redis.NewCmd(ctx, args...)
		_ = pl.Process(ctx, rcs[i])
	}
	_, _ = pl.Exec(ctx)
	replies := make([]driver.Reply, len(cmds))
	for i, cmd := range rcs {
		replies[i] = reply(cmd)
	}
	return replies
}

// reply is cmd's answer as a driver.Reply: go-redis's values are the
// driver's (int64, string, []any), and its redis.Nil is driver.ErrNil.
func reply(cmd *redis.Cmd) driver.Reply {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return driver.Reply{Err: driver.ErrNil}
	}
	if err != nil {
		return driver.Reply{Err: err}
	}
	return driver.Reply{Val: v}
}

// Subscribe opens a pub/sub connection: on a Cluster client, one per hash
// slot of the shard channels subscribed (SSUBSCRIBE). go-redis refuses a
// Ring's subscription without a channel, and a Ring's channels are sharded
// apart from its keys: the library subscribes to none over a Ring.
func (c Conn) Subscribe() driver.Subscription {
	if cc, ok := c.c.(*redis.ClusterClient); ok {
		return newShardSubs(cc)
	}
	return sub{c.c.Subscribe(context.Background())}
}

// failoverAddr is the Options().Addr go-redis gives every client made by
// NewFailoverClient, or by NewUniversalClient with a MasterName: a
// placeholder that names no server. go-redis keeps the master name and the
// sentinel addresses out of reach of such a *redis.Client.
const failoverAddr = "FailoverClient"

// Topology says what c is: a plain client (its address, or "unix:" and its
// socket's path), a failover client (its master reached as the master sees
// the connection), a Cluster client (its seeds; every master), a Ring
// (its shards). A client of another type (a wrapper) is one server at an
// unknown address: INFO reaches whichever master it sends it to.
func (c Conn) Topology() driver.Topology {
	switch rc := c.c.(type) {
	case *redis.Client:
		o := rc.Options()
		switch {
		case o.Addr == failoverAddr:
			return driver.Topology{Kind: driver.Failover, Servers: func(ctx context.Context, fn func(context.Context, string, driver.Conn)) error {
				// Where the sentinel sent us, as the master saw it.
				var addr string
				if ci, err := rc.ClientInfo(ctx).Result(); err == nil {
					addr = ci.LAddr
				}
				fn(ctx, addr, c)
				return nil
			}}
		case o.Network == "unix":
			return driver.Topology{Addrs: []string{"unix:" + o.Addr}}
		}
		return driver.Topology{Addrs: []string{o.Addr}}
	case *redis.ClusterClient:
		return driver.Topology{Kind: driver.Cluster, Addrs: rc.Options().Addrs, Servers: each(rc.ForEachMaster)}
	case *redis.Ring:
		return driver.Topology{Kind: driver.Ring, Addrs: slices.Sorted(maps.Values(rc.Options().Addrs)), Servers: each(rc.ForEachShard)}
	}
	return driver.Topology{}
}

// each is Topology's Servers over forEach (ForEachMaster, ForEachShard),
// which visits the servers in parallel.
func each(forEach func(context.Context, func(context.Context, *redis.Client) error) error) func(context.Context, func(context.Context, string, driver.Conn)) error {
	return func(ctx context.Context, fn func(context.Context, string, driver.Conn)) error {
		return forEach(ctx, func(ctx context.Context, c *redis.Client) error {
			fn(ctx, c.Options().Addr, New(c))
			return nil
		})
	}
}

// sub is a go-redis PubSub as a driver.Subscription.
type sub struct{ ps *redis.PubSub }

func (s sub) Subscribe(ctx context.Context, channel string) error {
	return s.ps.Subscribe(ctx, channel)
}

func (s sub) Unsubscribe(ctx context.Context, channel string) error {
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
func (s sub) Run(deliver func(driver.Event)) {
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
			k := driver.Unsubscribed
			if m.Kind == "subscribe" {
				k = driver.Subscribed
			}
			deliver(driver.Event{Kind: k, Channel: m.Channel})
		case *redis.Message:
			deliver(driver.Event{Kind: driver.Message, Channel: m.Channel, Payload: m.Payload})
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
func (s sub) check(ctx context.Context, heard *atomic.Bool) {
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

func (s sub) Close() error { return s.ps.Close() }
