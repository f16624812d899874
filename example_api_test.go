package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

// New takes one client per independent master: a majority of them must
// agree for a lock to be held.
func ExampleNew() {
	nodes := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "redis1:6379"}),
		redis.NewClient(&redis.Options{Addr: "redis2:6379"}),
		redis.NewClient(&redis.Options{Addr: "redis3:6379"}),
	}
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(50*time.Millisecond))
	if errors.Is(err, redlock.ErrInvalidArgument) {
		fmt.Println("bad nodes or options:", err) // a nil client, one server twice, an option out of range
		return
	}
	if err != nil {
		fmt.Println(err) // ErrGuardRights, ErrEvictionPolicy: the masters' configuration
		return
	}
	defer c.Close()
}

// Lock waits for the lock, as long as ctx allows.
func ExampleClient_Lock() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "invoice:42", 10*time.Second)
	switch {
	case errors.Is(err, redlock.ErrNotObtained):
		fmt.Println("not obtained before ctx ended:", err)
		return
	case err != nil:
		fmt.Println(err) // ErrInvalidArgument, ErrClosed
		return
	}
	fmt.Println("holding", l.Key())
	_ = l.Unlock(ctx)
	// Output: holding invoice:42
}

// Close ends the Client; operations after it return ErrClosed. It does
// not release locks still held: they expire with their TTL.
func ExampleClient_Close() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)

	_ = c.Close()
	_, err := c.TryLock(context.Background(), "k", time.Second)
	fmt.Println(errors.Is(err, redlock.ErrClosed))
	// Output: true
}

// TryLockMulti takes several keys at once, or none, without waiting.
func ExampleClient_TryLockMulti() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	held, _ := c.TryLock(ctx, "seat:2", time.Minute)
	_, err := c.TryLockMulti(ctx, []string{"seat:1", "seat:2"}, time.Minute)
	fmt.Println("seats 1 and 2 while 2 is held:", errors.Is(err, redlock.ErrNotObtained))
	_ = held.Unlock(ctx)

	l, err := c.TryLockMulti(ctx, []string{"seat:1", "seat:2"}, time.Minute)
	fmt.Println("once 2 is free:", err == nil)
	_ = l.Unlock(ctx)
	// Output:
	// seats 1 and 2 while 2 is held: true
	// once 2 is free: true
}

// DoMulti runs fn holding several keys, extended while it runs.
func ExampleClient_DoMulti() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	err := c.DoMulti(context.Background(), []string{"account:1", "account:2"}, 10*time.Second,
		func(ctx context.Context) error {
			fmt.Println("moving money under", redlock.LockFromContext(ctx).Keys())
			return nil
		})
	fmt.Println("err:", err)
	// Output:
	// moving money under [account:1 account:2]
	// err: <nil>
}

// LockFromContext finds, inside Do's fn, the lock fn runs under: for its
// fence, or to hand its key and token on.
func ExampleLockFromContext() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	_ = c.Do(context.Background(), "job:9", 10*time.Second, func(ctx context.Context) error {
		l := redlock.LockFromContext(ctx)
		fmt.Println(l.Key(), time.Until(l.Until()) > 0)
		return nil
	})
	fmt.Println(redlock.LockFromContext(context.Background()) == nil)
	// Output:
	// job:9 true
	// true
}

// Key and Keys name what a lock holds; Token is its capability: only its
// holder may send it on (to Resume in another process), never a log.
func ExampleLock_Token() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	l, _ := c.TryLock(context.Background(), "k", time.Minute)
	fmt.Println(l.Key(), l.Keys(), len(l.Token()) > 0)
	_ = l.Unlock(context.Background())
	// Output: k [k] true
}

// Key of a single-key lock is its key.
func ExampleLock_Key() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	l, _ := c.TryLock(context.Background(), "invoice:42", time.Minute)
	fmt.Println(l.Key())
	_ = l.Unlock(context.Background())
	// Output: invoice:42
}

// Keys of a multi-key lock are all its keys, in the order given.
func ExampleLock_Keys() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	l, _ := c.TryLockMulti(context.Background(), []string{"b", "a"}, time.Minute)
	fmt.Println(l.Keys())
	_ = l.Unlock(context.Background())
	// Output: [b a]
}

// Until is when the lock's validity ends, by this process's clock: act
// under the lock only before it, and leave a margin for the action itself.
func ExampleLock_Until() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()

	l, _ := c.TryLock(context.Background(), "k", 10*time.Second)
	const margin = time.Second // how long the protected write can take
	if time.Until(l.Until()) > margin {
		fmt.Println("time enough to write")
	}
	_ = l.Unlock(context.Background())
	// Output: time enough to write
}

// Unlock's error says whether the work may have overlapped another
// holder's: ErrNotHeld means the lock had expired or been taken over.
func ExampleLock_Unlock() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	l, _ := c.TryLock(ctx, "k", time.Minute)
	fmt.Println("first:", l.Unlock(ctx))
	fmt.Println("again is ErrNotHeld:", errors.Is(l.Unlock(ctx), redlock.ErrNotHeld))
	// Output:
	// first: <nil>
	// again is ErrNotHeld: true
}

// Fence returns a number that grows with each holder of the key: a store
// that keeps the highest it has seen refuses a late write from an earlier
// holder (docs/fencing.md).
func ExampleLock_Fence() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	a, _ := c.TryLock(ctx, "row:1", time.Minute)
	fa, _ := a.Fence(ctx)
	_ = a.Unlock(ctx)
	b, _ := c.TryLock(ctx, "row:1", time.Minute)
	fb, _ := b.Fence(ctx)
	_ = b.Unlock(ctx)
	fmt.Println("the later holder's fence is higher:", fb > fa)
	// Output: the later holder's fence is higher: true
}

// Held asks the masters: a snapshot for dashboards, not a reason to act
// (Until and Done are).
func ExampleLock_Held() {
	nodes, stop := fiveMasters()
	defer stop()
	c, _ := redlock.New(nodes)
	defer c.Close()
	ctx := context.Background()

	l, _ := c.TryLock(ctx, "k", time.Minute)
	held, err := l.Held(ctx)
	fmt.Println(held, err)
	_ = l.Unlock(ctx)
	held, err = l.Held(ctx)
	fmt.Println(held, err)
	// Output:
	// true <nil>
	// false <nil>
}

// KeyHash is what to record instead of a key that may carry user data.
func ExampleKeyHash() {
	h := redlock.KeyHash("user:alice@example.com")
	fmt.Println(len(h), h == redlock.KeyHash("user:alice@example.com"), h == redlock.KeyHash("user:bob@example.com"))
	// Output: 16 true false
}

// An Observer sets only the fields it needs; they run synchronously, so
// they must be quick and safe for concurrent use.
func ExampleWithObserver() {
	nodes, stop := fiveMasters()
	defer stop()
	var mu sync.Mutex
	var seen []string
	c, _ := redlock.New(nodes, redlock.WithObserver(redlock.Observer{
		Acquire: func(e redlock.AcquireEvent) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("%s %s obtained=%v", e.Op, e.Key, e.Err == nil))
		},
	}))
	defer c.Close()

	l, _ := c.TryLock(context.Background(), "k", time.Minute)
	_ = l.Unlock(context.Background())
	mu.Lock()
	defer mu.Unlock()
	fmt.Println(seen)
	// Output: [try_lock k obtained=true]
}

// WithLogger logs to log/slog: at Warn, masters starting to fail and
// recovering; at Debug, every round. Keys are hashed (see
// WithKeyAttributes).
func ExampleWithLogger() {
	nodes, stop := fiveMasters()
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := redlock.New(nodes, redlock.WithLogger(logger))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithKeyAttributes logs keys as they are: only where logs may hold them.
func ExampleWithKeyAttributes() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithLogger(slog.Default()), redlock.WithKeyAttributes())
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithNodeTimeout bounds each master's reply: a master slower than this
// counts as a failed vote, and the round goes on with the others.
func ExampleWithNodeTimeout() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithNodeTimeout(20*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// Options out of range are refused with ErrInvalidArgument, never clamped.
func ExampleWithDriftFactor() {
	nodes, stop := fiveMasters()
	defer stop()
	_, err := redlock.New(nodes, redlock.WithDriftFactor(-1))
	fmt.Println(errors.Is(err, redlock.ErrInvalidArgument))
	// Output: true
}

// WithRetryDelay sets the backoff between a waiting Lock's attempts.
func ExampleWithRetryDelay() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithRetryDelay(5*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithoutNotices turns the pub/sub notices off: a waiting Lock learns of a
// release by its next attempt only. For masters whose ACL grants no
// channel rights.
func ExampleWithoutNotices() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithoutNotices())
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithRestartGuard sets how long a master whose memory is new (restarted
// without persistence) sits out: at least the longest TTL the Client uses.
func ExampleWithRestartGuard() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithRestartGuard(10*time.Minute))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithStrictRestartGuard counts a young master's yes only once every
// master has reported its memory in the round: it also covers two masters
// of a majority losing their data at once.
func ExampleWithStrictRestartGuard() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithStrictRestartGuard())
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithEvictingMasters accepts masters that may evict keys (a maxmemory
// policy other than noeviction), which New refuses otherwise.
func ExampleWithEvictingMasters() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithEvictingMasters())
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithBatchLimit(1) turns pipelining off: one command per request.
func ExampleWithBatchLimit() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithBatchLimit(1))
	if err != nil {
		panic(err)
	}
	defer c.Close()
}

// WithQuorumFirst asks a majority of the masters first, and the others
// only when those cannot decide alone: fewer commands per lock on a
// healthy deployment.
func ExampleWithQuorumFirst() {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithQuorumFirst())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	l, err := c.TryLock(context.Background(), "k", time.Minute)
	fmt.Println(err)
	_ = l.Unlock(context.Background())
	// Output: <nil>
}
