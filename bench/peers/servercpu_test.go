package peers

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/internal/redistest"
)

// BenchmarkServerCPU: what one master spends of its own CPU on one lock and
// unlock of a free key, for redlock's scripts and for the commands that
// could stand in for them, each sent in pipelines of serverCPUBatch pairs
// from one connection, as redlock's batches go under load (64 goroutines:
// about 25 requests a batch). Custom metric: srv-µs/op, the server's
// CPU per pair (its main thread's, from INFO cpu). ns/op is the client's
// time and means little here.
//
// The variants take turns in one run; each reports its CPU per pair and
// that over the floor's (x/floor):
//   - redlock: what an uncontended Lock and Unlock send, with the restart
//     guard's marker known (the path almost every acquisition takes): the
//     quick acquisition (SET NX PX, with one GET of the marker after the
//     batch's SETs; the engine's quick.go), then the release script, with
//     a notice channel and quiet, as Unlock sends it;
//   - redlock-scripts: the acquire script instead of the quick
//     acquisition (what it costs when it must answer), then the release;
//   - floor: the bare majority lock's SET NX PX and compare-and-delete
//     script;
//   - floor-guarded: the floor and a GET of the marker: the least the
//     restart guard's check adds to it;
//   - empty-scripts: two scripts that only return, called with the
//     scripts' arguments: the fixed cost of a script call;
//   - plain: GET of the marker, SET NX PX, GET, DEL as plain commands, no
//     atomicity: the commands themselves.
func BenchmarkServerCPU(b *testing.B) {
	s := redistest.Start(b)
	c := s.Client(nil)
	empty := redis.NewScript("return 1")
	for _, sc := range []*redis.Script{redlockAcquire, redlockRelease, floorRelease, empty} {
		if err := sc.Load(bg, c).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// The first acquisition creates the marker and tells when the memory
	// began; redlock sends that with every call after.
	v, err := redlockAcquire.Run(bg, c, []string{"cpu:warm", "cpu:warm" + wantedSuffix, memoryMarker}, "t", ttl.Milliseconds(), "", "", "1", "0").Slice()
	if err != nil || len(v) != 4 {
		b.Fatal("the first acquisition: ", v, err)
	}
	born := fmt.Sprint(v[3])
	ms := ttl.Milliseconds()

	variants := []struct {
		name string
		pair func(pl redis.Pipeliner, key string)
		// tail, when not nil, is sent once after the pipeline's pairs.
		tail func(pl redis.Pipeliner)
	}{
		{"redlock", func(pl redis.Pipeliner, key string) {
			pl.Do(bg, "set", key, "tok", "nx", "px", ms)
			pl.EvalSha(bg, redlockRelease.Hash(), []string{key, key + wantedSuffix}, "tok", "ch", "msg", "1")
		}, func(pl redis.Pipeliner) {
			pl.Do(bg, "get", memoryMarker) // one for the batch's quick SETs
		}},
		{"redlock-scripts", func(pl redis.Pipeliner, key string) {
			pl.EvalSha(bg, redlockAcquire.Hash(), []string{key, key + wantedSuffix, memoryMarker}, "tok", ms, "", "", "1", born)
			pl.EvalSha(bg, redlockRelease.Hash(), []string{key, key + wantedSuffix}, "tok", "ch", "msg", "1")
		}, nil},
		{"floor", func(pl redis.Pipeliner, key string) {
			pl.SetNX(bg, key, "tok", ttl)
			pl.EvalSha(bg, floorRelease.Hash(), []string{key}, "tok")
		}, nil},
		{"floor-guarded", func(pl redis.Pipeliner, key string) {
			pl.SetNX(bg, key, "tok", ttl)
			pl.Get(bg, memoryMarker)
			pl.EvalSha(bg, floorRelease.Hash(), []string{key}, "tok")
		}, nil},
		{"empty-scripts", func(pl redis.Pipeliner, key string) {
			pl.EvalSha(bg, empty.Hash(), []string{key, key + wantedSuffix, memoryMarker}, "tok", ms, "", "", "1", born)
			pl.EvalSha(bg, empty.Hash(), []string{key, key + wantedSuffix}, "tok", "", "", "1")
		}, nil},
		{"plain", func(pl redis.Pipeliner, key string) {
			pl.Get(bg, memoryMarker)
			pl.SetNX(bg, key, "tok", ttl)
			pl.Get(bg, key)
			pl.Del(bg, key)
		}, nil},
	}
	keys := make([]string, serverCPUBatch)
	for i := range keys {
		keys[i] = "cpu:" + strconv.Itoa(i)
	}
	// The variants take turns, serverCPURound pairs each, so that the
	// machine's drift during the run falls on all of them alike.
	spent := make([]float64, len(variants))
	pairs := make([]int, len(variants))
	b.ResetTimer()
	for done := 0; done < b.N; done += serverCPURound {
		for i, v := range variants {
			start := serverCPU(b, c)
			for n := 0; n < serverCPURound; n += serverCPUBatch {
				pl := c.Pipeline()
				for _, k := range keys {
					v.pair(pl, k)
				}
				if v.tail != nil {
					v.tail(pl)
				}
				cmds, err := pl.Exec(bg)
				if err != nil {
					b.Fatal(err)
				}
				if v.tail != nil {
					cmds = cmds[:len(cmds)-1]
				}
				if err := freed(cmds, len(keys)); err != nil {
					b.Fatal(v.name, err)
				}
			}
			spent[i] += serverCPU(b, c) - start
			pairs[i] += serverCPURound
		}
	}
	floor := -1
	for i, v := range variants {
		if v.name == "floor" {
			floor = i
		}
	}
	for i, v := range variants {
		per := spent[i] / float64(pairs[i]) * 1e6
		b.ReportMetric(per, v.name+"-srv-µs/op")
		if floor >= 0 {
			b.ReportMetric(per/(spent[floor]/float64(pairs[floor])*1e6), v.name+"/floor")
		}
	}
}

// serverCPURound is how many pairs a variant runs before the next one's
// turn.
const serverCPURound = 2500

// serverCPUBatch is how many pairs go in one pipeline.
const serverCPUBatch = 25

// freed checks that the last command of each of the pairs in cmds reports
// its key deleted: every pair then found its key free, and no row measures
// refusals.
func freed(cmds []redis.Cmder, pairs int) error {
	per := len(cmds) / pairs
	for i := per - 1; i < len(cmds); i += per {
		var n int64
		switch c := cmds[i].(type) {
		case *redis.Cmd:
			n, _ = c.Int64()
		case *redis.IntCmd:
			n = c.Val()
		}
		if n < 1 {
			return fmt.Errorf("%v: deleted nothing", cmds[i].Args())
		}
	}
	return nil
}

// serversCPU returns a function that tells the servers' main threads' CPU
// since it was called, in seconds.
func serversCPU(b *testing.B, servers []*redistest.Server) func() float64 {
	admins := redistest.Clients(servers)
	sum := func() float64 {
		var t float64
		for _, a := range admins {
			t += serverCPU(b, a)
		}
		return t
	}
	start := sum()
	return func() float64 { return sum() - start }
}

// serverCPU returns the server's main thread's CPU so far, in seconds
// (Redis ≥ 6.2; the whole process's before).
func serverCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(bg, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]float64{}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			fields[k] = f
		}
	}
	if u, ok := fields["used_cpu_user_main_thread"]; ok {
		return u + fields["used_cpu_sys_main_thread"]
	}
	return fields["used_cpu_user"] + fields["used_cpu_sys"]
}
