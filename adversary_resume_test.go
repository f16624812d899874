package redlock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A1: a failed Resume (ErrNotHeld) still lengthens the key on the minority
// of masters that hold the token.
func TestAdvResumeFailureLengthensMinority(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l, err := c.TryLock(bg, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	for i := range 3 {
		r.admin[i].Del(bg, "k")
	}
	t.Logf("before: PTTLs %v", r.pttls("k"))
	_, err = c.Resume(bg, "k", l.Token(), time.Hour)
	t.Logf("Resume err: %v", err)
	settle(c)
	t.Logf("after: PTTLs %v", r.pttls("k"))
	for i := 3; i < 5; i++ {
		if d := r.pttls("k")[i]; d > 10*time.Second {
			t.Errorf("master %d: failed Resume lengthened the key from <=10s to %v", i, d)
		}
	}
}

// A2: a Resume that fails because a majority of masters were slow (paused)
// lengthens the key on all masters once they resume; nobody holds a Lock
// that can release it, and the original holder's validity ends long before.
func TestAdvResumeFailureLengthensMajorityAfterTimeout(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(100 * time.Millisecond)))
	l, err := c.TryLock(bg, "k", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	for i := 2; i < 5; i++ {
		r.servers[i].Pause()
	}
	_, err = c.Resume(bg, "k", l.Token(), time.Hour)
	t.Logf("Resume err: %v", err)
	if err == nil {
		t.Fatal("Resume unexpectedly succeeded")
	}
	for i := 2; i < 5; i++ {
		r.servers[i].Resume()
	}
	settle(c)
	time.Sleep(100 * time.Millisecond)
	t.Logf("after failed Resume: PTTLs %v (original lock ttl 2s, Until in %v)", r.pttls("k"), time.Until(l.Until()).Round(time.Millisecond))
	<-l.Done()
	time.Sleep(time.Second) // past the original key TTL
	other := r.client()
	_, err = other.TryLock(bg, "k", time.Second)
	t.Logf("TryLock by another client 1s after the original lock's Until: %v; PTTLs %v", err, r.pttls("k"))
	if err != nil {
		t.Errorf("key blocked after a failed Resume: %v", err)
	}
}

var _ = context.Background
var _ = errors.Is
var _ = runtime.NumGoroutine
var _ = strings.ToUpper
var _ sync.Mutex
var _ = uuid.NewString

// busy blocks master i for roughly d with a Lua busy loop (returns at once).
func (r *realNodes) busy(i int, iters int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.admin[i].Eval(bg, "local x=0 for i=1,tonumber(ARGV[1]) do x=x+i end return 1", nil, iters)
	}()
	return done
}

// A3: Resume whose ctx ends while the masters are busy returns ErrNotHeld,
// but the masters run the extension afterwards: the key on every master now
// lives for the failed Resume's TTL.
func TestAdvResumeCtxTimeoutStillExtendsMajority(t *testing.T) {
	for _, batch := range []int{DefaultBatchLimit, 1} {
		t.Run(fmt.Sprint("batch", batch), func(t *testing.T) { advCtxTimeout(t, batch) })
	}
}

func advCtxTimeout(t *testing.T, batch int) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(2*time.Second), WithBatchLimit(batch))
	l, err := c.TryLock(bg, "k", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	settle(c)
	var dones []<-chan struct{}
	t0 := time.Now()
	for i := range 5 {
		dones = append(dones, r.busy(i, 30_000_000))
	}
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	_, err = c.Resume(ctx, "k", l.Token(), time.Hour)
	cancel()
	t.Logf("Resume err: %v", err)
	for _, d := range dones {
		<-d
	}
	t.Logf("masters busy for %v", time.Since(t0))
	settle(c)
	t.Logf("after failed Resume: PTTLs %v (original lock ttl 3s)", r.pttls("k"))
	if err == nil {
		t.Fatal("Resume succeeded")
	}
	n := 0
	for _, d := range r.pttls("k") {
		if d > 3*time.Second {
			n++
		}
	}
	if n >= 3 {
		t.Errorf("failed Resume (err %v) lengthened the key on %d of 5 masters to ~1h", err, n)
	}
}

// A4: Until of a resumed Lock vs the masters, in several set-ups.
func TestAdvResumeUntilTrue(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(200*time.Millisecond)), WithRestartGuard(time.Second))
	other := r.client(WithRestartGuard(time.Second))
	for iter := range 20 {
		key := fmt.Sprint("u", iter)
		l, err := other.TryLock(bg, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		settle(other)
		switch iter % 4 {
		case 0: // resume ttl shorter than the key's
		case 1: // one master flushed, one paused and resumed mid-round
			r.admin[0].FlushAll(bg)
			r.servers[1].Pause()
			go func() { time.Sleep(scaled(50 * time.Millisecond)); r.servers[1].Resume() }()
		case 2: // two masters shortened behind the back
			r.admin[2].PExpire(bg, key, 100*time.Millisecond)
			r.admin[3].PExpire(bg, key, 100*time.Millisecond)
		case 3: // restart one master without data
			r.servers[4].Kill()
			r.servers[4].Restart()
			time.Sleep(50 * time.Millisecond)
		}
		l2, err := c.Resume(bg, key, l.Token(), scaled(500*time.Millisecond))
		if err != nil {
			t.Logf("iter %d: Resume: %v", iter, err)
			continue
		}
		r.assertUntilTrue(l2)
		if iter%4 == 2 {
			time.Sleep(150 * time.Millisecond)
			r.assertUntilTrue(l2)
		}
		if err := l2.Extend(bg, scaled(300*time.Millisecond)); err != nil {
			t.Logf("iter %d: Extend: %v", iter, err)
		} else {
			r.assertUntilTrue(l2)
		}
		_ = l2.Unlock(bg)
		for i := range r.servers {
			r.servers[i].Resume()
		}
	}
}

// A5: Inspect leaks no goroutine; Close concurrent with Inspect/Resume.
func TestAdvInspectGoroutinesAndClose(t *testing.T) {
	r := startReal(t, 5)
	base := runtime.NumGoroutine()
	for round := range 10 {
		key := fmt.Sprint("k", round)
		c := r.client(WithNodeTimeout(scaled(50 * time.Millisecond)))
		l, err := c.TryLock(bg, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if round%2 == 1 {
			r.servers[round%5].Pause()
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if g%2 == 0 {
						in, err := c.Inspect(bg, key)
						if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotObtained) {
							t.Errorf("Inspect: %+v %v", in, err)
						}
						_, _ = l.Held(bg)
					} else {
						l2, err := c.Resume(bg, key, l.Token(), 10*time.Second)
						if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotHeld) {
							t.Errorf("Resume: %v", err)
						}
						_ = l2
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * 5 * time.Millisecond)
		done := make(chan struct{})
		go func() { _ = c.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("Close hung:\n%s", buf[:runtime.Stack(buf, true)])
		}
		wg.Wait()
		for i := range r.servers {
			r.servers[i].Resume()
		}
		if _, err := c.Inspect(bg, key); !errors.Is(err, ErrClosed) {
			t.Errorf("Inspect after Close: %v", err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n := runtime.NumGoroutine(); n > base+5 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", base, n, buf[:runtime.Stack(buf, true)])
	} else {
		t.Logf("goroutines: %d before, %d after", base, n)
	}
}

// A6: Inspect odd keys.
func TestAdvInspectOddKeys(t *testing.T) {
	r := startReal(t, 3)
	c := r.client()
	big := strings.Repeat("x", 8<<20)
	r.admin[0].Set(bg, "k", big, 0)
	r.admin[1].RPush(bg, "k", "a")
	r.admin[1].PExpire(bg, "k", time.Minute)
	r.admin[2].Set(bg, "k", "", time.Second)
	in, err := c.Inspect(bg, "k")
	t.Logf("Inspect: Answered=%d Holding=%d Min=%v Max=%v Failed=%v err=%v", in.Answered, in.Holding, in.MinTTL, in.MaxTTL, in.Failed, err)
	t.Logf("HeldBy(big)=%d HeldBy(\"\")=%d", in.HeldBy(big), in.HeldBy(""))
	// a Resume/TryLock on those
	_, err = c.Resume(bg, "k", uuid.NewString(), time.Second)
	t.Logf("Resume on odd keys: %v", err)
	if got := r.pttls("k"); got[1] > time.Minute || got[2] > time.Second {
		t.Errorf("PTTLs changed: %v", got)
	}
	// nil ctx / empty key / odd tokens / huge ttl
	for _, ttl := range []time.Duration{-1, 1, time.Millisecond, 3 * time.Millisecond, 1<<63 - 1} {
		l, err := c.TryLock(bg, fmt.Sprint("t", ttl), ttl)
		if err != nil {
			t.Logf("TryLock ttl %v: %v", ttl, err)
			continue
		}
		l2, err := c.Resume(bg, fmt.Sprint("t", ttl), l.Token(), ttl)
		t.Logf("Resume ttl %v: until in %v, err %v, PTTLs %v", ttl, func() time.Duration {
			if l2 == nil {
				return 0
			}
			return time.Until(l2.Until())
		}(), err, r.pttls(fmt.Sprint("t", ttl)))
	}
	for _, tok := range []string{"00000000-0000-0000-0000-000000000000", "urn:uuid:" + uuid.NewString(), uuid.NewString() + "\x00"} {
		_, err := c.Resume(bg, "nokey", tok, time.Second)
		t.Logf("Resume token %q: %v", tok, err)
	}
	if got := r.values("nokey"); got[0]+got[1]+got[2] != "" {
		t.Errorf("Resume created nokey: %q", got)
	}
}

type advIv struct {
	token      string
	start, end time.Time
	what       string
}

// A7: mixed Lock (local hand-offs, cross-Client hand-offs) with Resume of
// handed-over tokens; no two tokens' validity windows may overlap.
func TestAdvResumeMixedNoOverlap(t *testing.T) {
	r := startReal(t, 5)
	a, b, c := r.client(), r.client(), r.client()
	const key = "mix"
	ttl := scaled(300 * time.Millisecond)
	var mu sync.Mutex
	var ivs []advIv
	add := func(iv advIv) { mu.Lock(); ivs = append(ivs, iv); mu.Unlock() }
	handed := make(chan *Lock)
	stop := time.Now().Add(15 * time.Second)
	var wg sync.WaitGroup
	var resumed, resumeFail, handoffs int
	locker := func(cl *Client, name string, g int, mayHand bool) {
		defer wg.Done()
		for i := 0; time.Now().Before(stop); i++ {
			ctx, cancel := context.WithTimeout(bg, 3*time.Second)
			l, err := cl.Lock(ctx, key, ttl)
			cancel()
			if err != nil {
				continue
			}
			st := time.Now()
			if mayHand && i%2 == 0 {
				select {
				case handed <- l: // C takes over; we never touch l again
					continue
				case <-time.After(scaled(20 * time.Millisecond)):
				}
			}
			time.Sleep(time.Duration(i%5) * time.Millisecond)
			if i%3 == 0 {
				_ = l.Extend(bg, ttl)
			}
			end := time.Now()
			if u := l.Until(); u.Before(end) {
				end = u
			}
			add(advIv{l.Token(), st, end, fmt.Sprintf("%s/%d", name, g)})
			_ = l.Unlock(bg)
		}
	}
	for g := range 3 {
		wg.Add(2)
		go locker(a, "A", g, true)
		go locker(b, "B", g, false)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop.Add(time.Second)) {
			var l *Lock
			select {
			case l = <-handed:
			case <-time.After(100 * time.Millisecond):
				continue
			}
			st := time.Now()
			l2, err := c.Resume(bg, key, l.Token(), ttl)
			if err != nil {
				resumeFail++
				add(advIv{l.Token(), st, l.Until(), "A-abandoned"})
				continue
			}
			resumed++
			time.Sleep(2 * time.Millisecond)
			_ = l2.Extend(bg, ttl)
			end := time.Now()
			if u := l2.Until(); u.Before(end) {
				end = u
			}
			// the token's window: from A's return to C's end
			add(advIv{l.Token(), st, end, "C-resumed"})
			_ = l2.Unlock(bg)
		}
	}()
	wg.Wait()
	_ = handoffs
	t.Logf("%d intervals, %d resumed, %d resume failures", len(ivs), resumed, resumeFail)
	bad := 0
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			x, y := ivs[i], ivs[j]
			if x.token == y.token {
				continue
			}
			if x.start.Before(y.end) && y.start.Before(x.end) {
				bad++
				if bad < 10 {
					t.Errorf("overlap: %s %s [%v] and %s %s [%v]", x.what, x.token[:8], x.end.Sub(x.start), y.what, y.token[:8], y.end.Sub(y.start))
				}
			}
		}
	}
}
