package engine

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/redistest"
)

// BenchmarkTails: the tails of an uncontended TryLock and Unlock on five
// masters when one of them is healthy, slow (its replies 50 ms late, through
// the fault suite's proxy), dead (its port refuses connections, as when its
// process is gone) or hung (a black hole: connections open, nothing
// answered). Each condition has a Client of its own on the same five
// redis-server processes, and the four take turns, tailsChunk operations
// each, so that the machine's drift falls on all alike; b.N operations per
// condition (-benchtime 3000x: a p99 of fewer is noise). Custom metrics, per
// condition: lock and unlock p50 and p99 in µs, and each lock p99 over the
// healthy one's (the ratio the performance goals read).
func BenchmarkTails(b *testing.B) {
	servers := redistest.StartN(b, 5)
	direct := benchClients(b, servers)

	slow, err := chaos.NewProxy("127.0.0.1:0", servers[4].Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer slow.Stop()
	slow.Latency(50 * time.Millisecond)
	hung, err := chaos.NewProxy("127.0.0.1:0", servers[4].Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer hung.Stop()
	hung.BlackHole()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connections are refused

	var extra []*redis.Client
	defer func() {
		for _, c := range extra {
			_ = c.Close()
		}
	}()
	with := func(addr string) []redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr})
		extra = append(extra, c)
		return append(slices.Clone(direct[:4]), c)
	}
	conds := []struct {
		name  string
		nodes []redis.UniversalClient
	}{
		{"healthy", direct},
		{"slow", with(slow.Addr())},
		{"dead", with(deadAddr)},
		{"hung", with(hung.Addr())},
	}
	clients := make([]*Client, len(conds))
	for i, cd := range conds {
		c, err := New(cd.nodes)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	locks := make([][]time.Duration, len(conds))
	unlocks := make([][]time.Duration, len(conds))
	b.ResetTimer()
	for done := 0; done < b.N; done += tailsChunk {
		for i, c := range clients {
			key := "tails:" + conds[i].name
			for range min(tailsChunk, b.N-done) {
				t0 := time.Now()
				l, err := c.TryLock(bg, key, 10*time.Second)
				t1 := time.Now()
				if err != nil {
					b.Fatalf("%s: TryLock: %v", conds[i].name, err)
				}
				if err := l.Unlock(bg); err != nil && conds[i].name == "healthy" {
					b.Fatalf("%s: Unlock: %v", conds[i].name, err)
				}
				locks[i] = append(locks[i], t1.Sub(t0))
				unlocks[i] = append(unlocks[i], time.Since(t1))
			}
		}
	}
	b.StopTimer()
	hung.Heal()
	var healthyP99 time.Duration
	for i, cd := range conds {
		lp50, lp99 := percentiles(locks[i])
		up50, up99 := percentiles(unlocks[i])
		if i == 0 {
			healthyP99 = lp99
		}
		b.ReportMetric(us(lp50), cd.name+"-lock-p50-µs")
		b.ReportMetric(us(lp99), cd.name+"-lock-p99-µs")
		b.ReportMetric(us(up50), cd.name+"-unlock-p50-µs")
		b.ReportMetric(us(up99), cd.name+"-unlock-p99-µs")
		if i > 0 {
			b.ReportMetric(float64(lp99)/float64(healthyP99), cd.name+"/healthy-lock-p99")
		}
	}
}

// tailsChunk is how many operations a condition of BenchmarkTails runs
// before the next one's turn.
const tailsChunk = 100

// percentiles returns the median and the 99th percentile of ds, sorting it.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[len(ds)*99/100]
}

// us is d in microseconds, for a metric.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
