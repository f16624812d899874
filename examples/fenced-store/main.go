// Command fenced-store shows Kleppmann's scenario end to end, and how
// fencing tokens (Lock.Fence) defeat it: holder A takes a lock, gets its
// fence and is paused past the lock's validity; holder B, another process,
// takes the lock, gets a higher fence and writes; A resumes and writes with
// its stale fence. A store that checks fences rejects A's write and keeps
// B's; a store that does not (the control run) lets A overwrite B's update.
//
// It runs on five embedded in-process masters and needs nothing but Go:
//
//	go run ./examples/fenced-store
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-store:", err)
		os.Exit(1)
	}
}

// run plays the scenario twice on five embedded masters, against a store
// that checks fences and then against one that does not, and says what
// each run shows.
func run(ctx context.Context, out io.Writer) error {
	addrs, stop, err := startMasters(5)
	if err != nil {
		return err
	}
	defer stop()
	a, closeA, err := newClient(addrs)
	if err != nil {
		return err
	}
	defer closeA()
	b, closeB, err := newClient(addrs)
	if err != nil {
		return err
	}
	defer closeB()

	fmt.Fprintf(out, "Holders A and B, two redlock Clients as two processes would be, share five embedded\n"+
		"masters. A locks %q for %v, gets its fence and is paused past its validity.\n", item, ttlA)
	runs := []struct {
		title string
		store *Store
	}{
		{"1. The store checks fences", NewStore()},
		{"2. Control: the store does not check fences", NewUncheckedStore()},
	}
	for _, r := range runs {
		fmt.Fprintf(out, "\n== %s\n", r.title)
		o, err := play(ctx, a, b, r.store, out)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "   => %s\n", verdict(o))
	}
	return nil
}

// verdict says in one line what a run's outcome shows.
func verdict(o outcome) string {
	switch {
	case errors.Is(o.lateWrite, ErrStaleFence) && o.final == valueB:
		return fmt.Sprintf("the store keeps %q (fence %d): A's stale write (fence %d) was rejected",
			o.final, o.finalFence, o.fenceA)
	case o.lateWrite == nil && o.final == valueA:
		return fmt.Sprintf("the store holds %q: A's stale write (fence %d) overwrote B's (fence %d), "+
			"and B's update is LOST", o.final, o.fenceA, o.fenceB)
	}
	return fmt.Sprintf("unexpected: the store holds %q; A's write got %v", o.final, o.lateWrite)
}

// startMasters starts n in-process masters (redlocktest's); in production
// these are n independent redis-server instances.
func startMasters(n int) (addrs []string, stop func(), err error) {
	m, err := redlocktest.Run(n)
	if err != nil {
		return nil, nil, fmt.Errorf("start the embedded masters: %w", err)
	}
	return m.Addrs(), m.Close, nil
}

// newClient returns a redlock Client with its own connections to the
// masters at addrs, as one process would have, and a function that closes
// it and them.
func newClient(addrs []string) (*redlock.Client, func(), error) {
	var nodes []redis.UniversalClient
	for _, a := range addrs {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	closeNodes := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	c, err := redlock.New(nodes,
		redlock.WithNodeTimeout(50*time.Millisecond),
		redlock.WithRetryDelay(2*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		closeNodes()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); closeNodes() }, nil
}
