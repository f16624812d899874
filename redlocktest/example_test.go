package redlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

// refresh is the code under test: it rebuilds a cache under a lock, and
// must stop writing once the lock is lost.
func refresh(ctx context.Context, c *redlock.Client, lost func()) error {
	return c.Do(ctx, "cache:refresh", 300*time.Millisecond, func(ctx context.Context) error {
		lost() // the test's fault, while fn holds the lock
		select {
		case <-ctx.Done(): // the lock was lost: stop before writing
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("wrote the cache without the lock")
		}
	})
}

// A test of code whose Do loses its lock: Steal makes another holder take
// the key, as if the lock had expired under a long pause, and Do ends fn's
// ctx and returns ErrLockLost.
func Example_doLosesItsLock() {
	masters, err := redlocktest.Run(5) // in a test: redlocktest.Start(t, 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, err := redlock.New(masters.Clients())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	err = refresh(context.Background(), c, func() { masters.Steal("cache:refresh", time.Minute) })
	fmt.Println(errors.Is(err, redlock.ErrLockLost))
	// Output: true
}

// A master down is a minority: the lock is still obtained, and the
// masters that hold it are a majority.
func ExampleMasters_Down() {
	masters, err := redlocktest.Run(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, err := redlock.New(masters.Clients())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	masters.Down(0)
	masters.Down(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "report", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(masters.Votes("report", l.Token()), "of", masters.Len())

	masters.Down(2) // now a majority is down
	_, err = c.TryLock(ctx, "other", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained))
	// Output:
	// 3 of 5
	// true
}

// Expire ends a lock as its TTL running out would: the holder's Unlock
// reports that it no longer held it.
func ExampleMasters_Expire() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, err := redlock.New(masters.Clients())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	l, err := c.Lock(context.Background(), "job:7", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	masters.Expire("job:7")
	fmt.Println(errors.Is(l.Unlock(context.Background()), redlock.ErrNotHeld))
	// Output: true
}

// Pause holds a master's replies: with a majority paused, a TryLock gives
// up at its node timeout instead of hanging.
func ExampleMasters_Pause() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, err := redlock.New(masters.Clients(), redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	resume0 := masters.Pause(0)
	resume1 := masters.Pause(1)
	_, err = c.TryLock(context.Background(), "k", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained), errors.Is(err, redlock.ErrNodeTimeout))
	resume0()
	resume1()
	// Output: true true
}

// In a test, Start's masters stop when the test ends, and NewClient's
// Client is closed then too; AssertHeld and AssertFree look into the
// masters. (The test function is shown, not run.)
func ExampleStart() {
	testLockHeld := func(t *testing.T) {
		masters := redlocktest.Start(t, 5)
		c := masters.NewClient(t)
		l, err := c.Lock(context.Background(), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		masters.AssertHeld(t, l)
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		masters.AssertFree(t, "k")
	}
	_ = testLockHeld
}

// NewClient is redlock.New over every master, closed when the test ends.
// (The test function is shown, not run.)
func ExampleMasters_NewClient() {
	testWithOptions := func(t *testing.T) {
		masters := redlocktest.Start(t, 3)
		c := masters.NewClient(t, redlock.WithNodeTimeout(50*time.Millisecond))
		if _, err := c.TryLock(context.Background(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	_ = testWithOptions
}

// AssertHeld fails the test unless a majority of the masters hold the
// lock. (The test function is shown, not run.)
func ExampleMasters_AssertHeld() {
	testRefreshHoldsTheLock := func(t *testing.T) {
		masters := redlocktest.Start(t, 5)
		c := masters.NewClient(t)
		_ = c.Do(context.Background(), "cache:refresh", time.Minute, func(ctx context.Context) error {
			masters.AssertHeld(t, redlock.LockFromContext(ctx))
			return nil
		})
	}
	_ = testRefreshHoldsTheLock
}

// AssertFree fails the test if any master holds the key: nothing left
// behind. (The test function is shown, not run.)
func ExampleMasters_AssertFree() {
	testReleased := func(t *testing.T) {
		masters := redlocktest.Start(t, 5)
		c := masters.NewClient(t)
		_ = c.Do(context.Background(), "job", time.Minute, func(context.Context) error { return nil })
		masters.AssertFree(t, "job")
	}
	_ = testReleased
}

// Run starts masters outside a test; Close stops them. Len, Addrs and
// Clients describe them.
func ExampleRun() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	fmt.Println(masters.Len(), len(masters.Addrs()), len(masters.Clients()))
	// Output: 3 3 3
}

// Close stops the masters: their clients' commands fail from then on.
func ExampleMasters_Close() {
	masters, err := redlocktest.Run(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	c := masters.Clients()[0]
	masters.Close()
	fmt.Println(c.Ping(context.Background()).Err() != nil)
	// Output: true
}

// Len is how many masters there are: a majority is Len()/2+1.
func ExampleMasters_Len() {
	masters, err := redlocktest.Run(5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	fmt.Println("majority:", masters.Len()/2+1)
	// Output: majority: 3
}

// Addrs are for code that builds its own clients, as a process would.
func ExampleMasters_Addrs() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	var nodes []redis.UniversalClient
	for _, a := range masters.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		nodes = append(nodes, c)
	}
	c, err := redlock.New(nodes)
	fmt.Println(err)
	_ = c.Close()
	// Output: <nil>
}

// Clients are what redlock.New takes.
func ExampleMasters_Clients() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, err := redlock.New(masters.Clients())
	fmt.Println(err)
	_ = c.Close()
	// Output: <nil>
}

// Latency above the node timeout makes a master's vote a timeout.
func ExampleMasters_Latency() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, _ := redlock.New(masters.Clients(), redlock.WithNodeTimeout(50*time.Millisecond))
	defer c.Close()

	for i := range masters.Len() {
		masters.Latency(i, 300*time.Millisecond)
	}
	_, err = c.TryLock(context.Background(), "k", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNodeTimeout))
	for i := range masters.Len() {
		masters.Latency(i, 0)
	}
	// Output: true
}

// Up brings a master back with its data, as a restart from persistence.
func ExampleMasters_Up() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, _ := redlock.New(masters.Clients())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, _ := c.Lock(ctx, "k", time.Minute)
	masters.Down(0)
	masters.Down(1)
	fmt.Println("Extend with a majority down:", l.Extend(ctx, time.Minute) == nil)
	masters.Up(0)
	masters.Up(1)
	fmt.Println("Extend once they are up:", l.Extend(ctx, time.Minute) == nil)
	// Output:
	// Extend with a majority down: false
	// Extend once they are up: true
}

// LoseData restarts a master empty: the restart guard sets its votes aside
// until its memory is older than the guard.
func ExampleMasters_LoseData() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, _ := redlock.New(masters.Clients(), redlock.WithRestartGuard(time.Minute))
	defer c.Close()

	masters.LoseData(0)
	masters.Down(1)
	_, err = c.TryLock(context.Background(), "k", time.Second)
	fmt.Println(errors.Is(err, redlock.ErrNodeQuarantined))
	// Output: true
}

// Steal gives the key to a holder no Client knows, for a while.
func ExampleMasters_Steal() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, _ := redlock.New(masters.Clients())
	defer c.Close()

	masters.Steal("k", time.Minute)
	_, err = c.TryLock(context.Background(), "k", time.Second)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained))
	// Output: true
}

// Votes counts the masters that hold a key for a token.
func ExampleMasters_Votes() {
	masters, err := redlocktest.Run(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer masters.Close()
	c, _ := redlock.New(masters.Clients())
	defer c.Close()

	l, _ := c.TryLock(context.Background(), "k", time.Minute)
	fmt.Println(masters.Votes("k", l.Token()) >= 2)
	_ = l.Unlock(context.Background())
	// Output: true
}
