// Package peers runs redlock side by side with its peers, in one process,
// on the same real redis-server masters: go-redsync/redsync and a bare
// majority lock (the floor) on five masters, and bsm/redislock on one
// master (the single-node baseline every ratio is read against); and two
// bounds: the floor running redlock's own scripts (floor-scripts), and,
// under contention, the oracles (a turn told for free in one process; across
// processes, a turn heard from the masters, at no other cost). BenchmarkServerCPU
// measures what one master's CPU spends on redlock's scripts and on the
// commands that could stand in for them. It is a module of its own, so
// that the peers never enter redlock's module graph.
//
//	cd bench/peers && go test -run '^$' -bench . -benchmem -count 6 | tee new.txt
//	benchstat old.txt new.txt
//
// Read ratios within one run: ns/op of the baseline over ns/op of the
// subject is the subject's throughput as a multiple of the baseline's.
package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

const ttl = 10 * time.Second

var bg = context.Background()

var holdFlag = flag.String("contended.hold", "thread", "how BenchmarkContended's holders spend their 1 ms: thread (an OS sleep, exact) or timer (time.Sleep, which Go's netpoller overshoots)")

// checkHoldFlag fails the benchmark on a -contended.hold it does not know.
func checkHoldFlag(b *testing.B) {
	if *holdFlag != "thread" && *holdFlag != "timer" {
		b.Fatalf("-contended.hold=%q: want thread or timer", *holdFlag)
	}
}

// hold waits d as BenchmarkContended's holders do (-contended.hold).
func hold(d time.Duration) {
	if *holdFlag == "timer" {
		time.Sleep(d)
		return
	}
	threadSleep(d)
}

// A locker is one lock implementation over a set of masters: try makes one
// attempt, wait waits for the lock; both return the release.
type locker interface {
	try(ctx context.Context, key string) (release func() error, err error)
	wait(ctx context.Context, key string) (release func() error, err error)
	close()
}

// An impl makes lockers over the given masters; each locker is one
// process's worth (its own go-redis clients when the benchmark asks for
// them).
type impl struct {
	name  string
	nodes int // how many masters it uses
	make  func(clients []redis.UniversalClient) locker
	// family, when set, instead of make: returns a fresh make whose
	// lockers share state in this process (the oracle), for one run of
	// BenchmarkContended, the only benchmark that runs it.
	family func() func(clients []redis.UniversalClient) locker
}

var impls = []impl{
	{"bsm-1-node", 1, newBSM, nil},
	{"floor", 5, newFloor, nil},
	{"floor-guarded", 5, newGuardedFloor, nil},
	{"floor-scripts", 5, newScriptedFloor, nil},
	{"redsync", 5, newRedsync, nil},
	{"redlock", 5, newRedlock, nil},
	{"redlock-quorum-first", 5, newRedlockQuorumFirst, nil},
	{"oracle", 5, nil, newOracleFamily},
}

// Every benchmark gets five fresh masters, aged: each one's memory marker
// (redlock's restart guard) says its memory began ten minutes ago, as on
// masters that have been running for a while. On a master younger than
// the guard (a minute by default) redlock counts a vote only once every
// master has reported its memory, which a deployment pays in its first
// minute, or after a master lost its data, not under way.
func masters(b *testing.B) []*redistest.Server {
	servers := redistest.StartN(b, 5)
	for _, s := range servers {
		c := s.Client(nil)
		now, err := c.Time(bg).Result()
		if err == nil {
			born := now.Add(-10 * time.Minute).UnixMilli()
			err = c.Set(bg, memoryMarker, fmt.Sprintf("%d %d", born, ttl.Milliseconds()), 0).Err()
		}
		_ = c.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	return servers
}

func clients(servers []*redistest.Server) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		cs[i] = s.Client(nil)
	}
	return cs
}

// BenchmarkParallel: lock+unlock from 64 goroutines on distinct keys, one
// locker shared by all. Throughput as a multiple of bsm-1-node's is
// ns/op(bsm-1-node) / ns/op(x).
func BenchmarkParallel(b *testing.B) {
	for _, im := range impls {
		if im.family != nil {
			continue // the oracle only waits
		}
		b.Run(im.name, func(b *testing.B) {
			servers := masters(b)[:im.nodes]
			lk := im.make(clients(servers))
			defer lk.close()
			srv := serverCommands(b, servers)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("parallel:%d", next.Add(1))
				for pb.Next() {
					if err := pair(lk, key); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(srv())/float64(b.N), "srv-cmds/op")
		})
	}
}

// pair takes key and releases it; an attempt refused because the previous
// release's last deletes are still on their way is tried again.
func pair(lk locker, key string) error {
	for {
		release, err := lk.try(bg, key)
		if errors.Is(err, errNotObtained) {
			continue
		}
		if err != nil {
			return err
		}
		return release()
	}
}

var errNotObtained = errors.New("not obtained")

// BenchmarkUncontended: one goroutine, lock+unlock in a loop. Custom
// metric: the median pair, in µs.
func BenchmarkUncontended(b *testing.B) {
	for _, im := range impls {
		if im.family != nil {
			continue // the oracle only waits
		}
		b.Run(im.name, func(b *testing.B) {
			lk := im.make(clients(masters(b)[:im.nodes]))
			defer lk.close()
			var took []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if err := pair(lk, "uncontended"); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1000, "p50-µs")
		})
	}
}

// BenchmarkContended: 8 workers, each its own locker with its own go-redis
// clients (8 processes), take one key in turn and hold it 1 ms, until b.N
// acquisitions in all. ns/op is the time per acquisition. Custom metrics:
// the p99 wait for the lock, server commands per acquisition counting
// those run inside scripts, the turn (from a holder's release call to the
// next holder's wait returning), median and mean, and the hold: the 1 ms
// critical section as it ran, mean. ns/op is about the hold plus the mean
// turn.
//
// The holder spends its 1 ms in an OS sleep that holds its thread
// (threadSleep), exact, unless -contended.hold=timer: then in time.Sleep,
// which Go's runtime may overshoot by up to 1 ms. When the process idles
// with a timer due in less than a millisecond, the runtime waits in
// epoll_wait, whose timeout is whole milliseconds, rounded up
// (golang/go#44343): a holder whose process last woke 600 µs into its
// hold (a notice, a reply, a timer of any locker in the process) sleeps
// 1.6 ms. The hold then measures when the process was last busy, here
// with the notices, replies and timers of eight lockers, not the turn: in
// a trace of that variant, the holders' 1 ms timers fired 1.57 ms after
// they were set, on average, and the processors had gone idle just over
// 1 ms before each. (Across processes, BenchmarkContendedProcesses, the
// holder's own Client is still busy early in its hold.)
func BenchmarkContended(b *testing.B) {
	checkHoldFlag(b)
	for _, im := range impls {
		if strings.HasPrefix(im.name, "floor") {
			continue // they do not wait
		}
		b.Run(im.name, func(b *testing.B) {
			servers := masters(b)[:im.nodes]
			const workers = 8
			mk := im.make
			if im.family != nil {
				mk = im.family()
			}
			lks := make([]locker, workers)
			for i := range lks {
				lks[i] = mk(clients(servers))
				defer lks[i].close()
			}
			srv := serverCommands(b, servers)
			var (
				mu        sync.Mutex
				waits     []time.Duration
				turns     []time.Duration // from a holder's release call to the next wait's return
				unlocking atomic.Int64    // when the last holder called release (UnixNano); 0: none yet
				held      atomic.Int64    // the holds' total, in ns
				total     int
				wg        sync.WaitGroup
			)
			b.ResetTimer()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						start := time.Now()
						release, err := lks[w].wait(bg, "contended")
						if err != nil {
							b.Error(err)
							return
						}
						now := time.Now()
						mu.Lock()
						done := total >= b.N
						if !done {
							total++
							waits = append(waits, now.Sub(start))
							if u := unlocking.Swap(0); u != 0 {
								turns = append(turns, time.Duration(now.UnixNano()-u))
							}
						}
						mu.Unlock()
						hold(time.Millisecond) // the critical section
						end := time.Now()
						held.Add(int64(end.Sub(now)))
						unlocking.Store(end.UnixNano())
						_ = release()
						if done {
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if len(waits) == 0 {
				return // every worker failed, and said why
			}
			reportContention(b, waits, turns, time.Duration(held.Load()), srv())
		})
	}
}

// reportContention reports the contended benchmarks' metrics from the
// waits of every acquisition, the turns, the holds' total and the server
// commands the acquisitions took.
func reportContention(b *testing.B, waits, turns []time.Duration, held time.Duration, cmds int64) {
	total := len(waits)
	slices.Sort(waits)
	b.ReportMetric(float64(waits[total*99/100].Microseconds())/1000, "p99-wait-ms")
	b.ReportMetric(float64(cmds)/float64(total), "srv-cmds/acq")
	b.ReportMetric(float64(held.Nanoseconds())/float64(total)/1000, "hold-µs")
	if len(turns) > 0 {
		slices.Sort(turns)
		var sum time.Duration
		for _, t := range turns {
			sum += t
		}
		b.ReportMetric(float64(turns[len(turns)/2].Nanoseconds())/1000, "turn-µs")
		b.ReportMetric(float64(sum.Nanoseconds())/float64(len(turns))/1000, "turn-mean-µs")
	}
}

// serverCommands returns a function that counts the commands the servers
// ran since, counting those inside scripts (INFO commandstats), less the
// INFO calls that read them.
func serverCommands(b *testing.B, servers []*redistest.Server) func() int64 {
	admins := redistest.Clients(servers)
	count := func() int64 {
		var n int64
		for _, a := range admins {
			calls, err := redistest.CommandCalls(bg, a)
			if err != nil {
				b.Fatal(err)
			}
			for name, c := range calls {
				if name != "info" {
					n += c
				}
			}
		}
		return n
	}
	start := count()
	return func() int64 { return count() - start }
}

// redlock, as shipped.
type redlockLocker struct{ c *redlock.Client }

func newRedlock(clients []redis.UniversalClient) locker {
	c, err := redlock.New(clients)
	if err != nil {
		panic(err)
	}
	return redlockLocker{c}
}

// redlock asking a majority of the masters first (WithQuorumFirst).
func newRedlockQuorumFirst(clients []redis.UniversalClient) locker {
	c, err := redlock.New(clients, redlock.WithQuorumFirst())
	if err != nil {
		panic(err)
	}
	return redlockLocker{c}
}

func (r redlockLocker) try(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.TryLock(ctx, key, ttl)
	if errors.Is(err, redlock.ErrNotObtained) {
		return nil, errNotObtained
	}
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(bg) }, nil
}

func (r redlockLocker) wait(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.Lock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(bg) }, nil
}

func (r redlockLocker) close() { _ = r.c.Close() }

// redsync with its defaults (retry every 50–250 ms, 32 tries), but enough
// tries to wait out 7 other workers.
type redsyncLocker struct{ rs *redsync.Redsync }

func newRedsync(clients []redis.UniversalClient) locker {
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	return redsyncLocker{redsync.New(pools...)}
}

func (r redsyncLocker) try(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return nil, errNotObtained
		}
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(bg); return err }, nil
}

func (r redsyncLocker) wait(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1<<20))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(bg); return err }, nil
}

func (r redsyncLocker) close() {}

// bsm/redislock on one master; waiting polls every millisecond (it has no
// retry by default).
type bsmLocker struct{ c *redislock.Client }

func newBSM(clients []redis.UniversalClient) locker { return bsmLocker{redislock.New(clients[0])} }

func (r bsmLocker) try(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.Obtain(ctx, key, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errNotObtained
	}
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(bg) }, nil
}

func (r bsmLocker) wait(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(bg) }, nil
}

func (r bsmLocker) close() {}

// floor is the least a majority lock can do: one parallel round per
// operation, returning at the majority: SET NX PX to take, a
// compare-and-delete script to release, no waiting.
type floor struct {
	clients []redis.UniversalClient
	quorum  int
	guarded bool
	// scripted: the rounds run redlock's own acquire and release scripts,
	// as redlock sends them to a master whose memory it knows (known, per
	// master), announcing nothing: what a round costs with those scripts,
	// and nothing else of redlock's.
	scripted bool
	known    []string
}

// newGuardedFloor is the floor whose take is what a lean, script-free
// acquire with a restart guard would send (issue 13): one pipeline of SET
// NX PX, then GET of the master's memory marker (read after the SET, so
// that a marker still known proves the SET landed in the known memory),
// then GET of the key (a re-sent SET after a lost reply finds its own
// token). It measures that design's ceiling against the floor.
func newGuardedFloor(clients []redis.UniversalClient) locker {
	return &floor{clients: clients, quorum: len(clients)/2 + 1, guarded: true}
}

// newScriptedFloor is the floor running redlock's scripts (floor.scripted).
func newScriptedFloor(clients []redis.UniversalClient) locker {
	f := &floor{clients: clients, quorum: len(clients)/2 + 1, scripted: true}
	for _, c := range clients {
		// The first call creates the master's memory marker and tells when
		// the memory began ("born"): redlock then sends it with each call.
		v, err := redlockAcquire.Run(bg, c, []string{"floor:warm", "floor:warm" + wantedSuffix, memoryMarker}, "t", ttl.Milliseconds(), "", "", "1", "0").Slice()
		if err != nil || len(v) != 4 {
			panic(fmt.Sprint("floor-scripts: ", v, err))
		}
		f.known = append(f.known, fmt.Sprint(v[3]))
	}
	return f
}

// The names of redlock's keys beside a lock key: its scripts declare them.
const (
	wantedSuffix = script.WantedSuffix
	memoryMarker = script.PlainMarkerKey
)

// redlock's scripts, as it sends them.
var (
	redlockAcquire = script.Acquire.Script
	redlockRelease = script.Release.Script
)

func newFloor(clients []redis.UniversalClient) locker {
	return &floor{clients: clients, quorum: len(clients)/2 + 1}
}

var floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// round runs op on every master in parallel and reports whether a majority
// said yes, as soon as that is known; rest waits for the other replies.
func (f *floor) round(op func(c redis.UniversalClient) bool) (won bool, rest func()) {
	votes := make(chan bool, len(f.clients))
	for _, c := range f.clients {
		go func() { votes <- op(c) }()
	}
	yes, no := 0, 0
	for yes < f.quorum && no <= len(f.clients)-f.quorum {
		if <-votes {
			yes++
		} else {
			no++
		}
	}
	return yes >= f.quorum, func() {
		for range len(f.clients) - yes - no {
			<-votes
		}
	}
}

// try takes key. A failed attempt waits for every SET's reply before it
// releases: a SET that lands after its release would hold the key for the
// TTL, and on a loaded machine failed attempts then keep one another out
// (a livelock seen here). That wait is the least a correct lock needs;
// the success path still returns at the majority.
func (f *floor) try(ctx context.Context, key string) (func() error, error) {
	token := uuid.NewString()
	release := func() error {
		f.round(func(c redis.UniversalClient) bool {
			if f.scripted {
				return redlockRelease.Run(bg, c, []string{key, key + wantedSuffix}, token, "", "", "0").Err() == nil
			}
			return floorRelease.Run(bg, c, []string{key}, token).Err() == nil
		})
		return nil
	}
	won, rest := f.round(func(c redis.UniversalClient) bool {
		if f.scripted {
			i := slices.Index(f.clients, c)
			v, err := redlockAcquire.Run(ctx, c, []string{key, key + wantedSuffix, memoryMarker}, token, ttl.Milliseconds(), "", "", "1", f.known[i]).Result()
			if err != nil {
				return false
			}
			switch v := v.(type) {
			case int64: // the memory it knows: the vote + 4 × the longest TTL
				return v%4 == 1
			case []any:
				return len(v) == 4 && v[0] == int64(1)
			}
			return false
		}
		if f.guarded {
			var set *redis.BoolCmd
			var marker, cur *redis.StringCmd
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				set = p.SetNX(ctx, key, token, ttl)
				marker = p.Get(ctx, memoryMarker)
				cur = p.Get(ctx, key)
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return false
			}
			return (set.Val() || cur.Val() == token) && marker.Err() != nil == errors.Is(marker.Err(), redis.Nil)
		}
		ok, err := c.SetNX(ctx, key, token, ttl).Result()
		return err == nil && ok
	})
	if won {
		return release, nil
	}
	rest()
	_ = release()
	return nil, errNotObtained
}

func (f *floor) wait(context.Context, string) (func() error, error) {
	return nil, errors.New("floor: no waiting")
}

func (f *floor) close() {}

// The oracle is the least a turn can cost on five masters, across
// processes: a bare majority lock whose holder passes the key to the next
// waiter in one round (a compare-and-set script on every master, returning
// at the majority), and whose waiters learn of their turn from a Go channel
// in this process, which costs nothing. No lock across processes has such a
// channel: its waiters must hear of their turn from the masters (pub/sub,
// as redlock's do) or poll them (as bsm's and redsync's do). No restart
// guard, no validity, no notices to anybody: it is a bound, not a lock to
// use. It takes part in BenchmarkContended only.
type oracle struct {
	clients []redis.UniversalClient
	shared  *oracleLine
}

// oracleLine is what the oracle's lockers share: per key, whether a locker
// holds it, and the waiters in line.
type oracleLine struct {
	mu   sync.Mutex
	held map[string]bool
	line map[string][]*oracleTurn
}

// An oracleTurn is a waiter in line: the token it will hold, and the
// channel closed once the key is its.
type oracleTurn struct {
	token string
	ch    chan struct{}
}

func newOracleFamily() func(clients []redis.UniversalClient) locker {
	shared := &oracleLine{held: map[string]bool{}, line: map[string][]*oracleTurn{}}
	return func(clients []redis.UniversalClient) locker {
		return &oracle{clients: clients, shared: shared}
	}
}

// oracleHandOff replaces ARGV[1]'s key with ARGV[2]'s for ARGV[3] ms.
var oracleHandOff = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 end return 0`)

func (o *oracle) try(context.Context, string) (func() error, error) {
	return nil, errors.New("oracle: only waits")
}

// wait takes the key by a bare acquisition round when nobody holds it, or
// queues for it and waits for its turn.
func (o *oracle) wait(ctx context.Context, key string) (func() error, error) {
	s := o.shared
	t := &oracleTurn{token: uuid.NewString(), ch: make(chan struct{})}
	s.mu.Lock()
	free := !s.held[key]
	if free {
		s.held[key] = true
	} else {
		s.line[key] = append(s.line[key], t)
	}
	s.mu.Unlock()
	if free {
		f := &floor{clients: o.clients, quorum: len(o.clients)/2 + 1}
		for { // the last holder's deletes may still be on their way
			won, rest := f.round(func(c redis.UniversalClient) bool {
				ok, err := c.SetNX(ctx, key, t.token, ttl).Result()
				return err == nil && ok
			})
			rest()
			if won {
				break
			}
			f.round(func(c redis.UniversalClient) bool {
				return floorRelease.Run(bg, c, []string{key}, t.token).Err() == nil
			})
		}
	} else {
		select {
		case <-t.ch:
		case <-ctx.Done():
			return nil, ctx.Err() // (the benchmark never cancels)
		}
	}
	return func() error { return o.release(key, t.token) }, nil
}

// release hands the key to the first in line, or deletes it.
func (o *oracle) release(key, token string) error {
	s := o.shared
	s.mu.Lock()
	var next *oracleTurn
	if line := s.line[key]; len(line) > 0 {
		next, s.line[key] = line[0], line[1:]
	} else {
		s.held[key] = false
	}
	s.mu.Unlock()
	f := &floor{clients: o.clients, quorum: len(o.clients)/2 + 1}
	if next == nil {
		f.round(func(c redis.UniversalClient) bool {
			return floorRelease.Run(bg, c, []string{key}, token).Err() == nil
		})
		return nil
	}
	won, _ := f.round(func(c redis.UniversalClient) bool {
		n, err := oracleHandOff.Run(bg, c, []string{key}, token, next.token, ttl.Milliseconds()).Int()
		return err == nil && n == 1
	})
	close(next.ch)
	if !won {
		return errors.New("oracle: the hand-off reached no majority")
	}
	return nil
}

func (o *oracle) close() {}
