// Commands: reply types, nil replies, errors, scripts, pipelines,
// concurrent use, the topology, and ctx's end.

package drivertest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/redistest"
)

// replies: each reply type as the library reads it, the arguments it
// sends (strings, ints, int64s), and nil replies matching driver.ErrNil.
func (s *suite) replies(t *testing.T) {
	c := s.conn(t)
	do(t, c, "del", "dt:s", "dt:n", "dt:l")
	if v := do(t, c, "set", "dt:s", "v"); v != "OK" {
		t.Fatalf("SET = %#v, want \"OK\"", v)
	}
	if v := do(t, c, "get", "dt:s"); v != "v" {
		t.Fatalf("GET = %#v, want \"v\"", v)
	}
	if v := do(t, c, "incrby", "dt:n", int64(40)); v != int64(40) {
		t.Fatalf("INCRBY = %#v, want int64(40)", v)
	}
	if v := do(t, c, "incrby", "dt:n", 2); v != int64(42) {
		t.Fatalf("INCRBY with an int = %#v, want int64(42)", v)
	}
	do(t, c, "rpush", "dt:l", "a", "b")
	if v := do(t, c, "lrange", "dt:l", 0, -1); !reflect.DeepEqual(v, []any{"a", "b"}) {
		t.Fatalf("LRANGE = %#v, want []any{\"a\", \"b\"}", v)
	}
	nested := do(t, c, "eval", `return {1, "x", {2, "y"}, {}}`, 0)
	if want := []any{int64(1), "x", []any{int64(2), "y"}, []any{}}; !reflect.DeepEqual(nested, want) {
		t.Fatalf("EVAL of nested arrays = %#v, want %#v", nested, want)
	}
	for _, args := range [][]any{{"get", "dt:missing"}, {"eval", "return false", 0}, {"eval", "return nil", 0}} {
		r := c.Do(ctx(t), args...)
		if !errors.Is(r.Err, driver.ErrNil) || r.Val != nil {
			t.Fatalf("%v = %#v, want Val nil and an error matching driver.ErrNil", args, r)
		}
		if _, err := r.Text(); !errors.Is(err, driver.ErrNil) {
			t.Fatalf("%v: Text() error %v, want driver.ErrNil", args, err)
		}
	}
	if v := do(t, c, "eval", "return 1", 0); v != int64(1) {
		t.Fatalf("a script's integer = %#v, want int64(1)", v)
	}
}

// errorReplies: a server's error reply comes with its message as the server
// wrote it, prefix first (but for a generic "ERR ", which a driver may
// strip), and is not driver.ErrNil.
func (s *suite) errorReplies(t *testing.T) {
	c := s.conn(t)
	do(t, c, "set", "dt:str", "v")
	for _, tc := range []struct {
		args   []any
		prefix string
	}{
		{[]any{"lpush", "dt:str", "x"}, "WRONGTYPE"},
		{[]any{"incr", "dt:str"}, "value is not an integer"}, // after "ERR ", which a driver may strip
		{[]any{"evalsha", strings.Repeat("0", 40), 0}, "NOSCRIPT"},
		{[]any{"eval", `return redis.error_reply("MYERR custom")`, 0}, "MYERR custom"},
	} {
		r := c.Do(ctx(t), tc.args...)
		if r.Err == nil || !strings.HasPrefix(strings.TrimPrefix(r.Err.Error(), "ERR "), tc.prefix) {
			t.Fatalf("%v: error %v, want one whose message starts %q", tc.args, r.Err, tc.prefix)
		}
		if errors.Is(r.Err, driver.ErrNil) {
			t.Fatalf("%v: error %v matches driver.ErrNil", tc.args, r.Err)
		}
	}
	if _, err := (driver.Reply{Val: "x"}).Int64(); err == nil {
		t.Fatal("Int64 of a string reply: no error")
	}
}

// scripts: EVALSHA of a loaded script, NOSCRIPT once the script cache is
// flushed (the library falls back to EVAL; the adapter must not hide it),
// and EVAL again.
func (s *suite) scripts(t *testing.T) {
	c := s.conn(t)
	const src = `return redis.call("SET", KEYS[1], ARGV[1])`
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	if v := do(t, c, "script", "load", src); v != sha {
		t.Fatalf("SCRIPT LOAD = %#v, want %q", v, sha)
	}
	if v := do(t, c, "evalsha", sha, 1, "dt:script", "a"); v != "OK" {
		t.Fatalf("EVALSHA = %#v, want \"OK\"", v)
	}
	do(t, c, "script", "flush")
	r := c.Do(ctx(t), "evalsha", sha, 1, "dt:script", "b")
	if r.Err == nil || !strings.HasPrefix(r.Err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA after SCRIPT FLUSH = %#v, want a NOSCRIPT error", r)
	}
	if v := do(t, c, "eval", src, 1, "dt:script", "c"); v != "OK" {
		t.Fatalf("EVAL = %#v, want \"OK\"", v)
	}
	if v := do(t, c, "evalsha", sha, 1, "dt:script", "d"); v != "OK" {
		t.Fatalf("EVALSHA after EVAL = %#v, want \"OK\"", v)
	}
}

// pipeline: DoMulti returns one reply per command, in order, each as Do
// would give it, errors and nil replies in their places.
func (s *suite) pipeline(t *testing.T) {
	c := s.conn(t)
	do(t, c, "del", "dt:p", "dt:pl")
	if got := c.DoMulti(ctx(t)); len(got) != 0 {
		t.Fatalf("DoMulti of nothing = %v, want no replies", got)
	}
	got := c.DoMulti(ctx(t),
		[]any{"set", "dt:p", "v"},
		[]any{"get", "dt:p"},
		[]any{"incr", "dt:p"},
		[]any{"get", "dt:p:missing"},
		[]any{"rpush", "dt:pl", "a", "b"},
		[]any{"evalsha", strings.Repeat("0", 40), 0},
		[]any{"lrange", "dt:pl", 0, -1},
	)
	want := []driver.Reply{{Val: "OK"}, {Val: "v"}, {}, {}, {Val: int64(2)}, {}, {Val: []any{"a", "b"}}}
	if len(got) != len(want) {
		t.Fatalf("DoMulti returned %d replies, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		switch i {
		case 2:
			if got[i].Err == nil || !strings.Contains(got[i].Err.Error(), "not an integer") {
				t.Fatalf("reply %d = %#v, want INCR's error on a string", i, got[i])
			}
		case 3:
			if !errors.Is(got[i].Err, driver.ErrNil) {
				t.Fatalf("reply %d = %#v, want driver.ErrNil", i, got[i])
			}
		case 5:
			if got[i].Err == nil || !strings.HasPrefix(got[i].Err.Error(), "NOSCRIPT") {
				t.Fatalf("reply %d = %#v, want a NOSCRIPT error", i, got[i])
			}
		default:
			if got[i].Err != nil || !reflect.DeepEqual(got[i].Val, w.Val) {
				t.Fatalf("reply %d = %#v, want %#v", i, got[i], w)
			}
		}
	}
	const n = 300 // more than one write buffer
	cmds := make([][]any, n)
	for i := range cmds {
		cmds[i] = []any{"incr", "dt:pn"}
	}
	do(t, c, "del", "dt:pn")
	for i, r := range c.DoMulti(ctx(t), cmds...) {
		if r.Err != nil || r.Val != int64(i+1) {
			t.Fatalf("reply %d of %d INCRs = %#v, want %d", i, n, r, i+1)
		}
	}
}

// pipelineOneConnection: a DoMulti's commands go on one connection (the
// server runs them in the order given; driver.Conn's DoMulti), even with
// many goroutines sending at once: CLIENT ID twice in one DoMulti names one
// connection.
func (s *suite) pipelineOneConnection(t *testing.T) {
	c := s.conn(t)
	const workers, each = 16, 20
	inParallel(t, "pipelines", workers, func(int) error {
		for range each {
			r := c.DoMulti(context.Background(), []any{"client", "id"}, []any{"client", "id"})
			if len(r) != 2 || r[0].Err != nil || r[1].Err != nil || r[0].Val != r[1].Val {
				return fmt.Errorf("DoMulti(CLIENT ID, CLIENT ID) = %#v: two connections", r)
			}
		}
		return nil
	})
}

// concurrent: one Conn used from many goroutines at once, plain commands
// and pipelines mixed.
func (s *suite) concurrent(t *testing.T) {
	c := s.conn(t)
	do(t, c, "del", "dt:c")
	const workers, each = 16, 50
	inParallel(t, "concurrent commands", workers, func(w int) error {
		for i := range each {
			if w%2 == 0 {
				if r := c.Do(context.Background(), "incr", "dt:c"); r.Err != nil {
					return r.Err
				}
				continue
			}
			for _, r := range c.DoMulti(context.Background(), []any{"incr", "dt:c"}, []any{"get", fmt.Sprint("dt:c:", w, i)}) {
				if r.Err != nil && !errors.Is(r.Err, driver.ErrNil) {
					return r.Err
				}
			}
		}
		return nil
	})
	if v := do(t, c, "get", "dt:c"); v != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %#v, want %d", v, workers*each)
	}
}

// topology: what a plain master's Conn says of itself, and the servers it
// visits answer INFO.
func (s *suite) topology(t *testing.T) {
	c := s.conn(t)
	top := c.Topology()
	if top.Kind != driver.Single {
		t.Fatalf("a plain master's Topology().Kind = %d, want Single", top.Kind)
	}
	if len(top.Addrs) > 1 {
		t.Fatalf("a plain master's Topology().Addrs = %v: more than one", top.Addrs)
	}
	if top.Servers == nil {
		return
	}
	var mu sync.Mutex
	var visited int
	err := top.Servers(ctx(t), func(ctx context.Context, _ string, server driver.Conn) {
		if _, err := server.Do(ctx, "info", "server").Text(); err != nil {
			t.Errorf("INFO on a server behind the Conn: %v", err)
		}
		mu.Lock()
		visited++
		mu.Unlock()
	})
	if err != nil || visited != 1 {
		t.Fatalf("Servers visited %d servers (%v), want 1", visited, err)
	}
}

// cancel: a call whose ctx is already done does not reach the server,
// or returns at once.
func (s *suite) cancel(t *testing.T) {
	c := s.conn(t)
	do(t, c, "del", "dt:cancel")
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, redistest.Scaled(time.Second), "Do with a cancelled ctx", func() {
		if r := c.Do(cctx, "incr", "dt:cancel"); r.Err == nil {
			t.Errorf("Do with a cancelled ctx = %#v, want an error", r)
		}
	})
	within(t, redistest.Scaled(time.Second), "DoMulti with a cancelled ctx", func() {
		for i, r := range c.DoMulti(cctx, []any{"incr", "dt:cancel"}, []any{"incr", "dt:cancel"}) {
			if r.Err == nil {
				t.Errorf("reply %d of DoMulti with a cancelled ctx = %#v, want an error", i, r)
			}
		}
	})
}

// hung: on a server that answers nothing (SIGSTOP), Do and DoMulti return
// with an error soon after their ctx's deadline, and the Conn works again
// once the server does.
func (s *suite) hung(t *testing.T) {
	c := s.conn(t)
	do(t, c, "ping") // a connection is open
	srv := s.servers[0]
	srv.Pause()
	defer srv.Resume()
	deadline := 200 * time.Millisecond
	bound := deadline + redistest.Scaled(time.Second)
	within(t, bound, "Do on a hung server", func() {
		dctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if r := c.Do(dctx, "ping"); r.Err == nil {
			t.Errorf("Do on a hung server = %#v, want an error", r)
		}
	})
	within(t, bound, "DoMulti on a hung server", func() {
		dctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		for i, r := range c.DoMulti(dctx, []any{"ping"}, []any{"ping"}) {
			if r.Err == nil {
				t.Errorf("reply %d of DoMulti on a hung server = %#v, want an error", i, r)
			}
		}
	})
	srv.Resume()
	within(t, redistest.Scaled(10*time.Second), "Do after the server resumed", func() {
		// The first may meet the timed-out connection's late reply's end.
		for try := 0; ; try++ {
			r := c.Do(ctx(t), "ping")
			if r.Err == nil {
				if r.Val != "PONG" {
					t.Errorf("PING = %#v after the server resumed", r)
				}
				return
			}
			if try == 3 {
				t.Errorf("PING after the server resumed: %v", r.Err)
				return
			}
		}
	})
}
