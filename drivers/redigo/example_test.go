package redigo_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/drivers/redigo"
	"github.com/redlock-go/redlock/redlocktest"
)

// pool is a redigo pool of connections to addr, with a dial function (a
// subscription dials connections of its own with it) and read and write
// timeouts that bound a call on a hung master.
func pool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle:     4,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(time.Second),
				redis.DialReadTimeout(5*time.Second),
				redis.DialWriteTimeout(time.Second))
		},
	}
}

// New makes each master's pool a node of a redlock Client. Its address
// names the node, and lets redlock refuse one master given twice. The
// pools stay the caller's to close, after the redlock Client.
func ExampleNew() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	var nodes []driver.Conn
	for _, addr := range masters.Addrs() {
		p := pool(addr)
		defer p.Close()
		nodes = append(nodes, redigo.New(p, addr))
	}
	c, err := redlock.NewFromDrivers(nodes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	l, err := c.TryLock(context.Background(), "report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("locked", l.Key())
	fmt.Println(l.Unlock(context.Background()))
	// Output:
	// locked report
	// <nil>
}

// Do sends one command, its name first, on a connection of the pool, and
// returns the reply as the server sent it (bulk strings as strings); a nil
// reply is an error matching driver.ErrNil.
func ExampleConn_Do() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	addr := masters.Addrs()[0]
	p := pool(addr)
	defer p.Close()
	conn := redigo.New(p, addr)
	ctx := context.Background()

	fmt.Println(conn.Do(ctx, "SET", "k", "token-1", "PX", 30000, "NX").Text())
	fmt.Println(conn.Do(ctx, "GET", "k").Text())
	_, err = conn.Do(ctx, "GET", "missing").Text()
	fmt.Println(errors.Is(err, driver.ErrNil))
	// Output:
	// OK <nil>
	// token-1 <nil>
	// true
}

// DoMulti sends its commands on one connection, flushed together, and
// returns their replies in order, each with its own error.
func ExampleConn_DoMulti() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	addr := masters.Addrs()[0]
	p := pool(addr)
	defer p.Close()
	conn := redigo.New(p, addr)

	replies := conn.DoMulti(context.Background(),
		[]any{"SET", "k", "token-1"},
		[]any{"INCR", "k"},
		[]any{"GET", "k"},
	)
	for _, r := range replies {
		fmt.Println(r.Val, r.Err)
	}
	// Output:
	// OK <nil>
	// <nil> ERR value is not an integer or out of range
	// token-1 <nil>
}

// Subscribe opens a subscription on a connection of its own, dialled with
// the pool's DialContext; Run delivers its confirmations and messages, on
// a goroutine of its own, until Close.
func ExampleConn_Subscribe() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	addr := masters.Addrs()[0]
	p := pool(addr)
	defer p.Close()
	conn := redigo.New(p, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	s := conn.Subscribe()
	events := make(chan driver.Event, 8)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		s.Run(func(e driver.Event) { events <- e })
	}()
	next := func() driver.Event {
		select {
		case e := <-events:
			return e
		case <-ctx.Done():
			return driver.Event{Kind: -1}
		}
	}

	if err := s.Subscribe(ctx, "news"); err != nil {
		fmt.Println(err)
		return
	}
	e := next()
	fmt.Println(e.Kind == driver.Subscribed, e.Channel)
	conn.Do(ctx, "PUBLISH", "news", "hello")
	e = next()
	fmt.Println(e.Kind == driver.Message, e.Channel, e.Payload)

	_ = s.Close()
	<-ran
	// Output:
	// true news
	// true news hello
}

// Topology is one master at the address New was given, or at none when
// New was given "".
func ExampleConn_Topology() {
	p := pool("10.0.0.1:6379") // Topology uses no connection
	defer p.Close()

	t := redigo.New(p, "10.0.0.1:6379").Topology()
	fmt.Println(t.Kind == driver.Single, t.Addrs, t.Servers == nil)
	t = redigo.New(p, "").Topology()
	fmt.Println(len(t.Addrs))
	// Output:
	// true [10.0.0.1:6379] true
	// 0
}
