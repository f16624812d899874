// Package rueidis adapts github.com/redis/rueidis to package driver, so
// that a redlock Client reaches its masters through rueidis clients:
//
//	conns := make([]driver.Conn, len(addrs))
//	for i, addr := range addrs {
//		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
//		...
//		if conns[i], err = redlockrueidis.New(rc); err != nil { ... }
//	}
//	c, err := redlock.NewFromDrivers(conns)
//
// A node is a standalone master or one found through Redis Sentinel.
// Redis Cluster is go-redis only (redlock.New): New refuses a rueidis
// Cluster client, whose arbitrary commands it could not route. rueidis
// pipelines concurrent commands on its own; DoMulti sends a batch as one
// rueidis DoMulti. A subscription holds a dedicated connection
// (Client.Dedicate) and, when it breaks, takes another and subscribes
// again; rueidis's periodic PINGs (ConnWriteTimeout) find a half-open one.
package rueidis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock-go/redlock/driver"
)

// A Conn is a rueidis client as a driver.Conn. Two Conns of one client
// are equal (==). Its methods are safe for concurrent use.
type Conn struct{ c rueidis.Client }

// ErrCluster is New's error for a rueidis Cluster client.
var ErrCluster = errors.New("redlock/drivers/rueidis: a Redis Cluster client is not supported (redlock.New takes a go-redis ClusterClient)")

// New returns c as a driver.Conn: an error matching ErrCluster for a
// Cluster client, and one for a nil c. The caller keeps c: closing it is
// its job, after the redlock Client's Close.
func New(c rueidis.Client) (Conn, error) {
	if c == nil || reflect.ValueOf(c).Kind() == reflect.Pointer && reflect.ValueOf(c).IsNil() {
		return Conn{}, errors.New("redlock/drivers/rueidis: nil client")
	}
	if c.Mode() == rueidis.ClientModeCluster {
		return Conn{}, ErrCluster
	}
	return Conn{c}, nil
}

// Client returns the rueidis client c adapts.
func (c Conn) Client() rueidis.Client { return c.c }

// Do sends one command (see driver.Conn).
func (c Conn) Do(ctx context.Context, args ...any) driver.Reply {
	cmd, err := build(c.c, args)
	if err != nil {
		return driver.Reply{Err: err}
	}
	return reply(c.c.Do(ctx, cmd))
}

// DoMulti sends cmds as one rueidis DoMulti (a pipeline).
func (c Conn) DoMulti(ctx context.Context, cmds ...[]any) []driver.Reply {
	if len(cmds) == 0 {
		return nil
	}
	replies := make([]driver.Reply, len(cmds))
	built := make([]rueidis.Completed, 0, len(cmds))
	at := make([]int, 0, len(cmds)) // built[j] is cmds[at[j]]
	for i, args := range cmds {
		cmd, err := build(c.c, args)
		if err != nil {
			replies[i] = driver.Reply{Err: err} // not sent: its error in its place
			continue
		}
		built = append(built, cmd)
		at = append(at, i)
	}
	if len(built) == 0 {
		return replies
	}
	for j, r := range c.c.DoMulti(ctx, built...) {
		replies[at[j]] = reply(r)
	}
	return replies
}

// build makes args a rueidis command; an error, never a panic, for what
// rueidis's builder refuses.
func build(c rueidis.CoreClient, args []any) (rueidis.Completed, error) {
	if len(args) == 0 {
		return rueidis.Completed{}, errors.New("redlock/drivers/rueidis: no command")
	}
	tokens := make([]string, len(args))
	for i, a := range args {
		tokens[i] = token(a)
	}
	if tokens[0] == "" {
		return rueidis.Completed{}, errors.New("redlock/drivers/rueidis: empty command name")
	}
	if strings.HasSuffix(strings.ToUpper(tokens[0]), "SUBSCRIBE") {
		return rueidis.Completed{}, fmt.Errorf("redlock/drivers/rueidis: %s outside a subscription", tokens[0])
	}
	return c.B().Arbitrary(tokens...).Build(), nil
}

// token is an argument as the server reads it.
func token(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case []byte:
		return string(a)
	case int:
		return strconv.Itoa(a)
	case int64:
		return strconv.FormatInt(a, 10)
	case uint64:
		return strconv.FormatUint(a, 10)
	case int32:
		return strconv.FormatInt(int64(a), 10)
	case uint32:
		return strconv.FormatUint(uint64(a), 10)
	case float64:
		return strconv.FormatFloat(a, 'f', -1, 64)
	case bool:
		if a {
			return "1"
		}
		return "0"
	}
	return fmt.Sprint(a)
}

// reply is rueidis's answer as a driver.Reply: its Nil is driver.ErrNil; a
// server's error comes as rueidis's *RedisError, whose message is the
// server's.
func reply(r rueidis.RedisResult) driver.Reply {
	v, err := r.ToAny()
	if rueidis.IsRedisNil(err) {
		return driver.Reply{Err: driver.ErrNil}
	}
	if err != nil {
		return driver.Reply{Err: err}
	}
	return driver.Reply{Val: v}
}

// Topology is one master: a standalone client's (its address), or the
// master a Sentinel client reaches now.
func (c Conn) Topology() driver.Topology {
	if c.c.Mode() == rueidis.ClientModeSentinel {
		return driver.Topology{Kind: driver.Failover, Servers: c.servers}
	}
	var t driver.Topology
	if nodes := c.c.Nodes(); len(nodes) == 1 {
		for addr := range nodes {
			t.Addrs = []string{addr}
		}
	}
	return t
}

// servers calls fn for each node the client knows now: a Sentinel
// client's master.
func (c Conn) servers(ctx context.Context, fn func(context.Context, string, driver.Conn)) error {
	for addr, n := range c.c.Nodes() {
		fn(ctx, addr, Conn{n})
	}
	return nil
}

// Subscribe opens a subscription on a dedicated connection, taken when
// Run starts.
func (c Conn) Subscribe() driver.Subscription {
	return &sub{c: c.c, wanted: map[string]bool{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// sub is a subscription over a rueidis dedicated connection that
// reconnects: the channels wanted are kept, and subscribed again on each
// new connection.
type sub struct {
	c    rueidis.Client
	done chan struct{} // closed by Close

	mu     sync.Mutex // guards the fields below, and the commands on dc
	dc     rueidis.DedicatedClient
	wanted map[string]bool
	closed bool

	// The hooks' events, queued for Run: a hook runs on rueidis's reader,
	// and must not block it (a SUBSCRIBE's reply waits behind it).
	qmu  sync.Mutex
	q    []driver.Event
	kick chan struct{} // a token when q may be non-empty
}

var errClosed = errors.New("redlock/drivers/rueidis: subscription closed")

// queue adds e for Run.
func (s *sub) queue(e driver.Event) {
	s.qmu.Lock()
	s.q = append(s.q, e)
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *sub) hooks() rueidis.PubSubHooks {
	return rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			s.queue(driver.Event{Kind: driver.Message, Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(m rueidis.PubSubSubscription) {
			switch m.Kind {
			case "subscribe":
				s.queue(driver.Event{Kind: driver.Subscribed, Channel: m.Channel})
			case "unsubscribe":
				s.queue(driver.Event{Kind: driver.Unsubscribed, Channel: m.Channel})
			}
		},
	}
}

func (s *sub) Subscribe(ctx context.Context, channel string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	s.wanted[channel] = true
	if s.dc == nil {
		return nil // Run subscribes the connection it takes to every channel wanted
	}
	return s.dc.Do(ctx, s.dc.B().Subscribe().Channel(channel).Build()).Error()
}

func (s *sub) Unsubscribe(ctx context.Context, channel string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	delete(s.wanted, channel)
	if s.dc == nil {
		return nil
	}
	return s.dc.Do(ctx, s.dc.B().Unsubscribe().Channel(channel).Build()).Error()
}

// Run takes a dedicated connection, subscribes it to the channels wanted,
// and delivers its events until it breaks, then takes another (at once,
// then every 100 ms while they fail at once), until Close.
func (s *sub) Run(deliver func(driver.Event)) {
	for fails := 0; ; {
		dc, cancel := s.c.Dedicate()
		broken := dc.SetPubSubHooks(s.hooks())
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			cancel() // nothing sent on it
			return
		}
		s.dc = dc
		chs := make([]string, 0, len(s.wanted))
		for ch := range s.wanted {
			chs = append(chs, ch)
		}
		var err error
		if len(chs) > 0 {
			ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			err = dc.Do(ctx, dc.B().Subscribe().Channel(chs...).Build()).Error()
			stop()
		}
		s.mu.Unlock()
		if err == nil {
			fails = 0
		}
		closed := s.deliver(deliver, broken)
		s.mu.Lock()
		s.dc = nil
		s.mu.Unlock()
		if closed {
			dc.Close() // not back to the pool subscribed
			return
		}
		cancel() // broken: the pool drops it
		if fails++; fails > 1 {
			select {
			case <-s.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// deliver hands the queued events to deliver until the connection breaks
// (false) or Close (true).
func (s *sub) deliver(deliver func(driver.Event), broken <-chan error) (closed bool) {
	for {
		select {
		case <-s.done:
			return true
		case err := <-broken:
			_ = err          // why it broke (or nil, closed): another connection either way
			s.flush(deliver) // what came before the break, in order
			return false
		case <-s.kick:
			s.flush(deliver)
		}
	}
}

// flush delivers the events queued.
func (s *sub) flush(deliver func(driver.Event)) {
	s.qmu.Lock()
	q := s.q
	s.q = nil
	s.qmu.Unlock()
	for _, e := range q {
		deliver(e)
	}
}

// Close ends the subscription; Run returns, and closes its connection.
func (s *sub) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}
