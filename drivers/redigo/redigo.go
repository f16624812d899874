// Package redigo adapts github.com/gomodule/redigo to package driver, so
// that a redlock Client reaches its masters through redigo pools:
//
//	pools := []*redis.Pool{p1, p2, p3}
//	conns := make([]driver.Conn, len(pools))
//	for i, p := range pools {
//		conns[i] = redigo.New(p, addrs[i])
//	}
//	c, err := redlock.NewFromDrivers(conns)
//
// Each node is one plain master (or one found through a proxy): redigo has
// no Cluster client, and Redis Cluster is go-redis only (redlock.New).
// Commands take a connection from the pool for each call; a subscription
// dials one of its own with the pool's Dial function and holds it for as
// long as it is open, and connects again, and subscribes again, when it
// breaks.
package redigo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/driver"
)

// A Conn is a redigo pool as a driver.Conn. Two Conns of one pool and
// address are equal (==). Its methods are safe for concurrent use.
type Conn struct {
	p    *redis.Pool
	addr string
}

// New returns the master that p's connections reach as a driver.Conn.
// addr is its address (host:port), which names the node in errors and
// logs and lets redlock refuse one address given as two nodes; "" when
// unknown (the node is then "node[i]", and told apart from the others by
// its INFO run_id alone). The caller keeps p: closing it is its job, after
// the redlock Client's Close.
//
// A call ends when its ctx does (redigo's DoContext), or at the pool's
// connections' read timeout when that comes first.
func New(p *redis.Pool, addr string) Conn { return Conn{p: p, addr: addr} }

// Do sends one command (see driver.Conn).
func (c Conn) Do(ctx context.Context, args ...any) driver.Reply {
	name, rest, err := command(args)
	if err != nil {
		return driver.Reply{Err: err}
	}
	if c.p == nil {
		return driver.Reply{Err: errNoPool}
	}
	rc, err := c.p.GetContext(ctx)
	if err != nil {
		return driver.Reply{Err: err}
	}
	defer rc.Close()
	return reply(redis.DoContext(rc, ctx, name, rest...))
}

// DoMulti sends cmds on one connection, flushed together, and reads their
// replies in order. A connection that breaks fails the replies not read.
func (c Conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Reply {
	if len(cmds) == 0 {
		return nil
	}
	replies := make([]driver.Reply, len(cmds))
	fail := func(from int, err error) []driver.Reply {
		for i := from; i < len(replies); i++ {
			replies[i] = driver.Reply{Err: err}
		}
		return replies
	}
	if c.p == nil {
		return fail(0, errNoPool)
	}
	rc, err := c.p.GetContext(ctx)
	if err != nil {
		return fail(0, err)
	}
	defer rc.Close()
	for i, args := range cmds {
		name, rest, err := command(args)
		if err != nil {
			replies[i] = driver.Reply{Err: err} // not sent: its error in its place
			continue
		}
		if err := rc.Send(name, rest...); err != nil {
			return fail(0, err)
		}
	}
	if err := rc.Flush(); err != nil {
		return fail(0, err)
	}
	for i := range replies {
		if replies[i].Err != nil {
			continue // never sent
		}
		v, err := redis.ReceiveContext(rc, ctx)
		if err != nil && !isServerError(err) {
			return fail(i, err)
		}
		replies[i] = reply(v, err)
	}
	return replies
}

// command splits args into the command's name and its arguments.
func command(args []any) (string, []any, error) {
	if len(args) == 0 {
		return "", nil, errors.New("redlock/drivers/redigo: no command")
	}
	name, ok := args[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("redlock/drivers/redigo: command name %v is not a string", args[0])
	}
	return name, args[1:], nil
}

// isServerError reports whether err is a server's error reply, which
// leaves the connection usable.
func isServerError(err error) bool {
	var e redis.Error
	return errors.As(err, &e)
}

// reply is redigo's answer as a driver.Reply: bulk strings ([]byte) become
// strings, in arrays too, and a nil reply driver.ErrNil.
func reply(v any, err error) driver.Reply {
	if err != nil {
		if errors.Is(err, redis.ErrNil) {
			return driver.Reply{Err: driver.ErrNil}
		}
		return driver.Reply{Err: err}
	}
	if v == nil {
		return driver.Reply{Err: driver.ErrNil}
	}
	return driver.Reply{Val: value(v)}
}

func value(v any) any {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case []any:
		for i, e := range v {
			v[i] = value(e)
		}
		return v
	}
	return v
}

// Topology is one master, at the address New was given.
func (c Conn) Topology() driver.Topology {
	if c.addr == "" {
		return driver.Topology{}
	}
	return driver.Topology{Addrs: []string{c.addr}}
}

// Subscribe opens a subscription on a connection of its own, outside the
// pool, dialled with the pool's Dial (or DialContext) at the first
// Subscribe or Run.
func (c Conn) Subscribe() driver.Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &sub{p: c.p, wanted: map[string]bool{}, ctx: ctx, cancel: cancel}
}

// pingEvery is how often a subscription's idle connection is sent a PING;
// one that carried nothing, not even the PONG, for deadAfter is taken for
// dead (a master that forgot it: a rebooted host, a NAT that dropped the
// flow) and replaced.
const (
	pingEvery = 1500 * time.Millisecond
	deadAfter = 3 * pingEvery
)

// sub is a redigo PubSubConn that reconnects: the channels wanted are
// kept, and subscribed again on each new connection.
type sub struct {
	p      *redis.Pool
	ctx    context.Context    // ends at Close: Run's dials and waits, and Subscribe's
	cancel context.CancelFunc // called by Close

	mu      sync.Mutex // guards the fields below, and writes on psc
	psc     *redis.PubSubConn
	wanted  map[string]bool
	pending []pend // the SUBSCRIBEs sent on psc whose answers have not come, in order
	closed  bool
}

// A pend is a SUBSCRIBE sent and not yet answered. res, when a Subscribe
// call waits for the answer, gets nil (subscribed) or the server's error
// (a refusal: NOPERM); nil when nobody waits (a new connection's
// subscriptions).
type pend struct {
	channel string
	res     chan error
}

var (
	errClosed = errors.New("redlock/drivers/redigo: subscription closed")
	errNoPool = errors.New("redlock/drivers/redigo: a Conn without a pool (New(nil, addr))")
)

// open dials a connection, without holding s.mu (a dial may take the
// pool's connect timeout), and makes it the subscription's: subscribed to
// the channels wanted. When another call opened one meanwhile, it is that
// one.
func (s *sub) open(ctx context.Context) (*redis.PubSubConn, error) {
	rc, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.psc != nil {
		_ = rc.Close()
		if s.closed {
			return nil, errClosed
		}
		return s.psc, nil
	}
	psc := &redis.PubSubConn{Conn: rc}
	if len(s.wanted) > 0 {
		chs := make([]any, 0, len(s.wanted))
		for ch := range s.wanted {
			chs = append(chs, ch)
			s.pending = append(s.pending, pend{channel: ch})
		}
		if err := psc.Subscribe(chs...); err != nil {
			s.pending = nil
			_ = rc.Close()
			return nil, err
		}
	}
	s.psc = psc
	return psc, nil
}

// dial opens a connection of the subscription's own with the pool's dial
// function (a pooled connection's Close unsubscribes and reads the
// confirmations, which races with Run's read and waits out the read
// timeout), and returns when ctx ends at the latest: a Dial without a
// context then goes on in the background until its own timeout, and its
// connection is closed.
func (s *sub) dial(ctx context.Context) (redis.Conn, error) {
	if s.p == nil {
		return nil, errNoPool
	}
	if s.p.DialContext != nil {
		return s.p.DialContext(ctx)
	}
	if s.p.Dial == nil {
		return nil, errors.New("redlock/drivers/redigo: the pool has no Dial function")
	}
	type dialed struct {
		c   redis.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, err := s.p.Dial()
		ch <- dialed{c, err}
	}()
	select {
	case d := <-ch:
		return d.c, d.err
	case <-ctx.Done(): // the dial ends in the background, at its own timeout
		go func() {
			if d := <-ch; d.c != nil {
				_ = d.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// drop forgets psc, broken, closes it, and fails the Subscribe calls that
// wait on it with err.
func (s *sub) drop(psc *redis.PubSubConn, err error) {
	s.mu.Lock()
	if s.psc == psc {
		s.psc = nil
		for _, p := range s.pending {
			if p.res != nil {
				p.res <- err
			}
		}
		s.pending = nil
	}
	s.mu.Unlock()
	_ = psc.Conn.Close()
}

// answered takes the oldest SUBSCRIBE's answer: nil, or the server's
// refusal, which also takes its channel out of those wanted.
func (s *sub) answered(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	p := s.pending[0]
	s.pending = s.pending[1:]
	if err != nil {
		delete(s.wanted, p.channel)
	}
	if p.res != nil {
		p.res <- err
	}
}

// Subscribe subscribes to channel. On an open connection it waits for the
// server's answer, which Run receives: a refusal (NOPERM) is its error. It
// opens a connection when there is none, subscribed to every channel
// wanted, and then returns without waiting: the confirmation comes through
// Run, and a refusal takes the channel out of those wanted, so the
// caller's next Subscribe returns it.
func (s *sub) Subscribe(ctx context.Context, channel string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	s.wanted[channel] = true
	if s.psc == nil {
		s.mu.Unlock()
		_, err := s.open(ctx)
		return err
	}
	if err := s.psc.Subscribe(channel); err != nil {
		s.mu.Unlock()
		return err
	}
	res := make(chan error, 1)
	s.pending = append(s.pending, pend{channel: channel, res: res})
	s.mu.Unlock()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return errClosed
	}
}

func (s *sub) Unsubscribe(_ context.Context, channel string) error { // a write: the dial's write timeout bounds it
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	delete(s.wanted, channel)
	if s.psc == nil {
		return nil // the next connection will not subscribe to it
	}
	return s.psc.Unsubscribe(channel)
}

// Run receives until Close, connecting again after a broken connection
// (at once, then every 100 ms while it fails).
func (s *sub) Run(deliver func(driver.Event)) {
	var heard atomic.Bool
	var pinger sync.WaitGroup
	pinger.Add(1)
	go func() {
		defer pinger.Done()
		s.ping(&heard)
	}()
	defer pinger.Wait()
	fails := 0
	for {
		s.mu.Lock()
		psc, closed := s.psc, s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		var err error
		if psc == nil {
			psc, err = s.open(s.ctx)
		}
		if errors.Is(err, errClosed) {
			return
		}
		if err != nil {
			if fails++; fails > 1 {
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		fails = 0
		s.drop(psc, s.receive(psc, deliver, &heard))
	}
}

// receive delivers psc's events until it fails, and returns why. A
// server's error reply (a refused SUBSCRIBE) leaves the connection usable:
// it answers the oldest SUBSCRIBE, whose waiting call, if any, learns of it
// before its channel's confirmations are delivered.
func (s *sub) receive(psc *redis.PubSubConn, deliver func(driver.Event), heard *atomic.Bool) error {
	for {
		switch m := psc.ReceiveWithTimeout(deadAfter).(type) {
		case error:
			if !isServerError(m) {
				return m
			}
			heard.Store(true)
			s.answered(m)
		case redis.Message:
			heard.Store(true)
			deliver(driver.Event{Kind: driver.Message, Channel: m.Channel, Payload: string(m.Data)})
		case redis.Subscription:
			heard.Store(true)
			switch m.Kind {
			case "subscribe":
				s.answered(nil)
				deliver(driver.Event{Kind: driver.Subscribed, Channel: m.Channel})
			case "unsubscribe":
				deliver(driver.Event{Kind: driver.Unsubscribed, Channel: m.Channel})
			}
		default: // a PONG
			heard.Store(true)
		}
	}
}

// ping sends a PING on the connection when nothing came on it since the
// last look, every pingEvery, until Close: its PONG keeps a live idle
// connection from being taken for dead (receive's deadAfter).
func (s *sub) ping(heard *atomic.Bool) {
	t := time.NewTicker(pingEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if heard.Swap(false) {
			continue
		}
		s.mu.Lock()
		if s.psc != nil {
			_ = s.psc.Ping("")
		}
		s.mu.Unlock()
	}
}

// Close closes the connection; Run returns.
func (s *sub) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	s.pending = nil
	if s.psc != nil {
		err := s.psc.Conn.Close()
		s.psc = nil
		return err
	}
	return nil
}
