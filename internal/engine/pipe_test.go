package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// batchRecorder records the batches a go-redis client sends: how many
// script calls each pipeline carried, and the keys of the script calls in the
// order they were sent.
type batchRecorder struct {
	mu    sync.Mutex
	sizes []int
	keys  []string
}

func (b *batchRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (b *batchRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		b.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (b *batchRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		b.record(cmds)
		return next(ctx, cmds)
	}
}
func (b *batchRecorder) record(cmds []redis.Cmder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	scripts := 0
	for _, c := range cmds {
		args := c.Args()
		switch {
		case len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[0]), "eval"):
			b.keys = append(b.keys, fmt.Sprint(args[3]))
			scripts++
		case isQuickSet(args): // a request of the quick acquisition (quick.go)
			b.keys = append(b.keys, fmt.Sprint(args[1]))
			scripts++
		}
	}
	b.sizes = append(b.sizes, scripts)
}

func (b *batchRecorder) largest() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, n := range b.sizes {
		m = max(m, n)
	}
	return m
}

// Requests made while a batch to a master is on its way go out together;
// with WithBatchLimit(1) every request is a
// command of its own.
func TestConcurrentRequestsToAMasterGoOutTogether(t *testing.T) {
	for _, limit := range []int{master.DefaultBatchLimit, 1} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			r := startReal(t, 5)
			rec := &batchRecorder{}
			r.clients[0].AddHook(rec)
			// The first release to master 0 is held before it is sent:
			// what is made meanwhile queues behind it.
			h := newBatchHold(script.Release, 1)
			r.clients[0].AddHook(h)
			c := r.client(WithBatchLimit(limit))
			t.Cleanup(h.open) // before Close, should the test fail while it holds
			first := mustLock(t, c, "first", time.Minute)
			go func() { _ = first.Unlock(bg) }()
			<-h.holding
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := c.TryLock(bg, fmt.Sprintf("k%d", i), time.Minute); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait() // at the other four masters
			h.open()
			settle(c)
			if limit == 1 {
				if n := rec.largest(); n != 1 {
					t.Fatalf("batching off: a pipeline of %d commands went out", n)
				}
				return
			}
			if n := rec.largest(); n != 8 {
				t.Fatalf("largest batch %d, want the 8 requests made behind the held one", n)
			}
			if got := count(r, "first", first.Token()); got != 0 {
				t.Fatalf("the held release did not run: %d keys left", got)
			}
		})
	}
}

// An acquisition's request that queued behind a hung batch, and whose round
// was lost and given up before it went out, is never sent: it could only
// set a key that would then need a release.
func TestGivenUpAcquireQueuedInAPipeIsNeverSent(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(200 * time.Millisecond)))
	mustLock(t, c, "warm", time.Minute) // connections open, scripts loaded
	h := newBatchHold(script.Acquire, 1)
	r.clients[0].AddHook(h)
	t.Cleanup(h.open) // before Close, should the test fail while it holds
	rec := &batchRecorder{}
	r.clients[0].AddHook(rec)
	go func() { _, _ = c.TryLock(bg, "hung", time.Minute) }() // its batch to master 0 hangs
	<-h.holding
	// Masters 1 to 3 are taken: the round for "k" is lost at once, while
	// its request to master 0 waits behind the hung batch.
	for _, i := range []int{1, 2, 3} {
		r.take(i, "k", "other", time.Minute)
	}
	if _, err := c.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock = %v, want ErrNotObtained", err)
	}
	h.open()
	settle(c)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, k := range rec.keys {
		if k == "k" {
			t.Fatalf("a request for \"k\" reached master 0 after its round was given up (sent: %q)", rec.keys)
		}
	}
}

// The restart guard's fast path (the script reads the marker only, when it
// is the memory the Client knows) still sees a master that lost its data,
// even when another Client has marked its new memory already.
func TestRestartGuardFastPathSeesANewMemory(t *testing.T) {
	m := newMinis(t, 5, nil)
	a := m.client()
	held := mustLock(t, a, "k", time.Minute) // a now knows every master's memory
	for _, i := range []int{3, 4} {
		if err := m.clients[i].Del(bg, "k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	m.servers[0].FlushAll() // a restart without persistence
	if _, err := m.client().TryLock(bg, "other", time.Minute); err != nil && !errors.Is(err, ErrNotObtained) {
		t.Fatal(err) // another Client marks master 0's new memory
	}
	settle(a)
	if _, err := a.TryLock(bg, "k", time.Minute); !errors.Is(err, ErrNodeQuarantined) {
		t.Fatalf("TryLock needing master 0 while %s still counts on it: %v, want ErrNodeQuarantined", held.Token()[:8], err)
	}
}

func TestBatchLimitBelowOneIsInvalid(t *testing.T) {
	m := newMinis(t, 1, nil)
	for _, n := range []int{0, -1} {
		if _, err := New(m.clients, WithBatchLimit(n)); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("WithBatchLimit(%d): %v, want ErrInvalidArgument", n, err)
		}
	}
}
