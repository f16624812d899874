package redlock_test

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

// fiveMasters starts five in-process masters (redlocktest's) so the
// examples run anywhere; in production these are five independent
// redis-server instances.
func fiveMasters() (nodes []redis.UniversalClient, stop func()) {
	m, err := redlocktest.Run(5)
	if err != nil {
		panic(err)
	}
	return m.Clients(), m.Close
}

func Example() {
	nodes, stop := fiveMasters()
	defer stop()

	c, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.Lock(ctx, "invoice:42", 10*time.Second)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("holding", l.Key(), "with validity left:", time.Until(l.Until()) > 9*time.Second)

	// ... work on invoice 42, committing it before releasing the lock ...

	// Unlock's error matters: ErrNotHeld means the lock had expired or been
	// taken over, so the work may have overlapped another holder's.
	if err := l.Unlock(ctx); errors.Is(err, redlock.ErrNotHeld) {
		fmt.Println("lost the lock before releasing it")
	}
	fmt.Println("released")
	// Output:
	// holding invoice:42 with validity left: true
	// released
}

func ExampleClient_TryLock() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	first, _ := c.TryLock(ctx, "report", time.Minute)
	_, err := c.TryLock(ctx, "report", time.Minute)

	var qe *redlock.QuorumError
	if errors.Is(err, redlock.ErrNotObtained) && errors.As(err, &qe) {
		fmt.Printf("busy: fewer than %d of 5 votes, someone holds it: %v\n",
			qe.Quorum, errors.Is(err, redlock.ErrNodeRefused))
	}
	_ = first.Unlock(ctx)
	// Output:
	// busy: fewer than 3 of 5 votes, someone holds it: true
}

func ExampleLock_Extend() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	l, _ := c.TryLock(ctx, "batch", 5*time.Second)
	before := l.Until()
	if err := l.Extend(ctx, time.Minute); err != nil {
		fmt.Println("extend:", err) // ErrNotHeld: lost; ErrNotObtained: still held until l.Until()
		return
	}
	fmt.Println("extended:", l.Until().After(before))
	_ = l.Unlock(ctx)
	// Output:
	// extended: true
}

// Do runs work that may outlive the TTL: the lock is extended while it runs,
// and its context is cancelled if the lock is lost.
func ExampleClient_Do() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "report:2026-11", 10*time.Second, func(ctx context.Context) error {
		fmt.Println("rendering under the lock")
		return ctx.Err() // nil unless the lock was lost
	})
	switch {
	case errors.Is(err, redlock.ErrNotObtained):
		fmt.Println("someone else is rendering")
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock mid-way: check the report")
	case err != nil:
		fmt.Println("render failed:", err)
	default:
		fmt.Println("done")
	}
	// Output:
	// rendering under the lock
	// done
}

// Done closes when the lock can no longer be trusted, so work can select on it.
func ExampleLock_Done() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.TryLock(context.Background(), "job", 10*time.Second)
	if err != nil {
		panic(err)
	}
	work := time.After(10 * time.Millisecond)
	select {
	case <-work:
		fmt.Println("work finished while held")
	case <-l.Done():
		fmt.Println("lock ended first: stop")
	}
	_ = l.Unlock(context.Background())
	<-l.Done()
	fmt.Println("released")
	// Output:
	// work finished while held
	// released
}

// Resume continues, in a worker, a lock that another process took: the
// job carries the lock's key and token.
func ExampleClient_Resume() {
	nodes, stop := fiveMasters()
	defer stop()
	accepting, _ := redlock.New(nodes) // the process that accepts the job
	defer accepting.Close()
	worker, _ := redlock.New(nodes) // the process that finishes it
	defer worker.Close()
	ctx := context.Background()

	l, _ := accepting.TryLock(ctx, "job:7", time.Minute)
	job := struct{ key, token string }{l.Key(), l.Token()} // sent with the job

	wl, err := worker.Resume(ctx, job.key, job.token, 30*time.Second)
	if err != nil {
		fmt.Println("resume:", err) // ErrNotHeld: released, expired or taken over
		return
	}
	fmt.Println("worker holds it:", wl.Token() == l.Token())
	_ = wl.Unlock(ctx)

	_, err = worker.Resume(ctx, job.key, job.token, 30*time.Second)
	fmt.Println("after Unlock:", errors.Is(err, redlock.ErrNotHeld))
	// Output:
	// worker holds it: true
	// after Unlock: true
}

// Inspect is a snapshot of a key on the masters, for dashboards and
// debugging, never for deciding whether to act.
func ExampleClient_Inspect() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	l, _ := c.TryLock(ctx, "report", time.Minute)
	in, err := c.Inspect(ctx, "report")
	if err != nil {
		fmt.Println("inspect:", err) // ErrNotObtained: fewer than a majority answered
		return
	}
	// (TryLock returned at a majority: the other masters' SETs may still be
	// on their way.)
	fmt.Printf("%d of %d answered; held by this lock on a majority: %v; TTL left ≤ 1m: %v\n",
		in.Answered, in.Masters, in.HoldingFor(l.Token()) >= in.Quorum, in.MaxTTL <= time.Minute)
	_ = l.Unlock(ctx)
	// Output:
	// 5 of 5 answered; held by this lock on a majority: true; TTL left ≤ 1m: true
}

// LockMulti holds several keys as one lock: all of them, or none.
func ExampleClient_LockMulti() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	l, err := c.LockMulti(ctx, []string{"account:1", "account:2"}, 10*time.Second)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	_, err = c.TryLock(ctx, "account:2", time.Second)
	fmt.Println("account:2 alone while both are held:", errors.Is(err, redlock.ErrNotObtained))
	fmt.Println("keys:", l.Keys())
	_ = l.Unlock(ctx) // releases both
	// Output:
	// account:2 alone while both are held: true
	// keys: [account:1 account:2]
}

// Votes of any kind: each is one independent master as far as Redlock
// counts, here two Redis Clusters (lock throughput grows with their shards)
// and a Sentinel-managed master. Not run: it needs those servers.
func Example_clusterAndSentinelVotes() {
	nodes := []redis.UniversalClient{
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"vote1-a:6379", "vote1-b:6379", "vote1-c:6379"}}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"vote2-a:6379", "vote2-b:6379", "vote2-c:6379"}}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "vote3", SentinelAddrs: []string{"sentinel-a:26379", "sentinel-b:26379"}}),
	}
	c, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// Keys of a multi-key lock share a hash tag on cluster votes.
	l, err := c.LockMulti(context.Background(), []string{"{order:7}:stock", "{order:7}:invoice"}, 10*time.Second)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	defer func() { _ = l.Unlock(context.Background()) }()
}

// NewFromDrivers takes any client library behind a driver.Conn adapter:
// here go-redis's own (what New wraps each client in); drivers/rueidis,
// drivers/valkey and drivers/redigo are the others (docs/drivers.md).
func ExampleNewFromDrivers() {
	clients, stop := fiveMasters()
	defer stop()
	conns := make([]driver.Conn, len(clients))
	for i, rc := range clients {
		conns[i] = goredis.New(rc)
	}

	c, err := redlock.NewFromDrivers(conns)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	l, err := c.TryLock(context.Background(), "report:7", 10*time.Second)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("holding", l.Key())
	_ = l.Unlock(context.Background())
	// Output: holding report:7
}
