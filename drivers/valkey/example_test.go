package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/driver"
	redlockvalkey "github.com/redlock-go/redlock/drivers/valkey"
	"github.com/redlock-go/redlock/redlocktest"
)

// New makes each valkey-go client a node of a redlock Client. The clients
// stay the caller's to close, after the redlock Client. (The examples run
// on redlocktest's in-process masters, which serve no client-side caching
// and answer CLUSTER SLOTS as a one-node cluster: hence DisableCache and
// ForceSingleClient, which a standalone redis-server does not need.)
func ExampleNew() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()

	var nodes []driver.Conn
	for _, addr := range masters.Addrs() {
		vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer vc.Close()
		conn, err := redlockvalkey.New(vc) // an error for a Cluster client
		if err != nil {
			fmt.Println(err)
			return
		}
		nodes = append(nodes, conn)
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

// dial returns a valkey-go client of masters' first, as a Conn.
func dial(masters *redlocktest.Masters) (redlockvalkey.Conn, error) {
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: masters.Addrs()[:1], DisableCache: true, ForceSingleClient: true})
	if err != nil {
		return redlockvalkey.Conn{}, err
	}
	conn, err := redlockvalkey.New(vc)
	if err != nil {
		vc.Close()
	}
	return conn, err
}

// Client gives back the valkey-go client behind a Conn: to close it, after
// the redlock Client, or for commands of its own.
func ExampleConn_Client() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn, err := dial(masters)
	if err != nil {
		fmt.Println(err)
		return
	}
	vc := conn.Client()
	defer vc.Close()

	fmt.Println(vc.Do(context.Background(), vc.B().Ping().Build()).ToString())
	// Output: PONG <nil>
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
	conn, err := dial(masters)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Client().Close()
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
// order, each with its own error (valkey-go strips the server's "ERR ").
func ExampleConn_DoMulti() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn, err := dial(masters)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Client().Close()

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
	// <nil> value is not an integer or out of range
	// token-1 <nil>
}

// Subscribe opens a subscription; Run takes a dedicated connection and
// delivers its confirmations and messages, on a goroutine of its own,
// until Close.
func ExampleConn_Subscribe() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn, err := dial(masters)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Client().Close()
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

// Topology says what stands behind a Conn without the network: a
// standalone client is a Single master at its address.
func ExampleConn_Topology() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	conn, err := dial(masters)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Client().Close()

	t := conn.Topology()
	fmt.Println(t.Kind == driver.Single, t.Addrs[0] == masters.Addrs()[0], t.Servers == nil)
	// Output: true true true
}
