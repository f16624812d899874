package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/redlocktest"
)

// New makes a go-redis client a node of NewFromDrivers, beside nodes of
// other drivers; redlock.New(clients) does the same for go-redis clients
// alone. The clients stay the caller's to close, after the redlock Client.
func ExampleNew() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	var nodes []driver.Conn
	for _, addr := range masters.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rc.Close()
		nodes = append(nodes, goredis.New(rc))
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

// Wrap adapts a slice of clients at once; a nil client becomes a nil Conn,
// which NewFromDrivers refuses.
func ExampleWrap() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	c, err := redlock.NewFromDrivers(goredis.Wrap(masters.Clients()))
	fmt.Println(err)
	_ = c.Close()

	_, err = redlock.NewFromDrivers(goredis.Wrap([]redis.UniversalClient{masters.Clients()[0], nil}))
	fmt.Println(errors.Is(err, redlock.ErrInvalidArgument))
	// Output:
	// <nil>
	// true
}

// Client gives back the go-redis client behind a Conn, for the commands
// go-redis has methods for.
func ExampleConn_Client() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	conn := goredis.New(masters.Clients()[0])
	fmt.Println(conn.Client().Ping(context.Background()).Val())
	fmt.Println(conn == goredis.New(masters.Clients()[0]))
	// Output:
	// PONG
	// true
}

// Do sends one command, its name first, and returns the reply as the
// server sent it; a nil reply is an error matching driver.ErrNil.
func ExampleConn_Do() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn := goredis.New(masters.Clients()[0])
	ctx := context.Background()

	fmt.Println(conn.Do(ctx, "SET", "k", "token-1", "PX", 30000, "NX").Text())
	fmt.Println(conn.Do(ctx, "PTTL", "k").Val.(int64) > 0)
	_, err = conn.Do(ctx, "GET", "missing").Text()
	fmt.Println(errors.Is(err, driver.ErrNil))
	// Output:
	// OK <nil>
	// true
	// true
}

// DoMulti sends its commands in one pipeline and returns their replies in
// order, each with its own error.
func ExampleConn_DoMulti() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn := goredis.New(masters.Clients()[0])

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

// Subscribe opens a pub/sub connection; Run delivers its confirmations and
// messages on a goroutine of its own until Close.
func ExampleConn_Subscribe() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn := goredis.New(masters.Clients()[0])
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

// Topology says what stands behind a Conn without the network: a plain
// client is a Single master at its address.
func ExampleConn_Topology() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	t := goredis.New(masters.Clients()[0]).Topology()
	fmt.Println(t.Kind == driver.Single, t.Addrs[0] == masters.Addrs()[0], t.Servers == nil)

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "10.0.0.1:6379", "b": "10.0.0.2:6379"}})
	defer ring.Close()
	t = goredis.New(ring).Topology()
	fmt.Println(t.Kind == driver.Ring, t.Addrs)
	// Output:
	// true true true
	// true [10.0.0.1:6379 10.0.0.2:6379]
}
