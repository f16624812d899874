package redlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// Benchmarks on real redis-server processes. Compare runs with benchstat:
//
//	go test -run '^$' -bench . -benchmem -count 10 | tee new.txt
//	benchstat old.txt new.txt
//
// BenchmarkSingleNode is the baseline the others are read against: the same
// scripts on one master, i.e. the cost of one round trip per operation.

// benchLockUnlock measures TryLock+Unlock; after the loop it calls heal (if
// not nil) before Close, so that Close need not wait out hung requests.
func benchLockUnlock(b *testing.B, nodes []redis.UniversalClient, heal func(), opts ...Option) {
	c, err := New(nodes, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l, err := c.TryLock(bg, "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(bg); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if heal != nil {
		heal()
	}
	_ = c.Close()
}

func benchClients(servers []*redistest.Server) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		cs[i] = s.Client(nil)
	}
	return cs
}

// BenchmarkSingleNode: TryLock+Unlock on one master (baseline).
func BenchmarkSingleNode(b *testing.B) {
	benchLockUnlock(b, benchClients(redistest.StartN(b, 1)), nil)
}

// BenchmarkFiveNodes: TryLock+Unlock, uncontended, on five masters.
func BenchmarkFiveNodes(b *testing.B) {
	benchLockUnlock(b, benchClients(redistest.StartN(b, 5)), nil)
}

// BenchmarkFiveNodesOnePaused: the same with one master SIGSTOPped for the
// whole run. Early return at a majority keeps it near BenchmarkFiveNodes;
// waiting for every node would make each operation take the node timeout.
func BenchmarkFiveNodesOnePaused(b *testing.B) {
	servers := redistest.StartN(b, 5)
	clients := benchClients(servers)
	servers[4].Pause()
	benchLockUnlock(b, clients, servers[4].Resume, WithNodeTimeout(50*time.Millisecond))
}
