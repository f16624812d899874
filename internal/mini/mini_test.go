package mini

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func client(t *testing.T, s *Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestScriptCommandsBypassTheHook(t *testing.T) {
	s := RunT(t)
	c := client(t, s)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // the handshake, before the hook
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	s.SetPreHook(func(cmd string, _ []string) error {
		mu.Lock()
		seen = append(seen, cmd)
		mu.Unlock()
		if cmd == "GET" {
			return errors.New("ERR the hook saw a GET")
		}
		return nil
	})
	before := s.CommandCount()
	v, err := c.Eval(ctx, "redis.call('SET', KEYS[1], 'v'); return redis.call('GET', KEYS[1])", []string{"k"}).Text()
	if err != nil || v != "v" {
		t.Fatalf("a script's GET went through the hook: %q, %v", v, err)
	}
	if got := s.CommandCount() - before; got != 1 {
		t.Errorf("CommandCount moved by %d for one EVAL, want 1", got)
	}
	if err := c.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "the hook saw a GET") {
		t.Errorf("a client's GET bypassed the hook: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, " ") != "EVAL GET" {
		t.Errorf("the hook saw %q, want the client's EVAL and GET only", seen)
	}
}

func TestAFrozenClockMovesTTLsAndTimeTogether(t *testing.T) {
	s := RunT(t)
	s.FreezeClock()
	c := client(t, s)
	ctx := context.Background()
	t0, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	s.FastForward(400 * time.Millisecond)
	if got := s.TTL("k"); got != 600*time.Millisecond {
		t.Errorf("TTL after 400ms of 1s = %v, want exactly 600ms", got)
	}
	t1, _ := c.Time(ctx).Result()
	if d := t1.Sub(t0); d != 400*time.Millisecond {
		t.Errorf("TIME moved by %v, want exactly 400ms", d)
	}
	s.FastForward(600 * time.Millisecond)
	if s.Exists("k") {
		t.Error("the key outlived its TTL on the server's clock")
	}
}

func TestARunningClockExpiresKeysInRealTime(t *testing.T) {
	s := RunT(t)
	c := client(t, s)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 20*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Exists("k") {
		if time.Now().After(deadline) {
			t.Fatal("a 20ms key still exists after 10s of real time")
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state, which has no signal
	}
}

func TestRestartKeepsDataAndChangesTheRunID(t *testing.T) {
	s := RunT(t)
	c := client(t, s)
	ctx := context.Background()
	runID := func() string {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "run_id:"); ok {
				return v
			}
		}
		t.Fatalf("INFO has no run_id: %q", info)
		return ""
	}
	before := runID()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.SetError("LOADING")
	s.Close()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if after := runID(); after == before || len(after) != 40 {
		t.Errorf("run_id %q after a restart, was %q", after, before)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET after a restart = %q, %v; want the data kept", v, err)
	}
}

// INFO answered while Close runs: the hook must not read the server that
// Close takes away.
func TestInfoDuringCloseDoesNotCrash(t *testing.T) {
	s, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	s.SetPreHook(func(cmd string, _ []string) error {
		if cmd == "INFO" {
			close(entered)
			<-release // INFO is past the hook's gate when Close starts
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- c.Info(ctx, "server").Err() }()
	<-entered
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	// Close takes the server away, then waits for this connection's
	// command: miniredis gives no signal for that moment, so the test reads
	// its field, under its lock.
	for !serverGone(s) {
		runtime.Gosched()
	}
	close(release)
	<-closed
	if err := <-done; err != nil { // an error or INFO's reply; a crash ends the test binary
		t.Logf("INFO during Close: %v", err)
	}
}

// serverGone reports whether Close has taken s's miniredis server away.
func serverGone(s *Server) bool {
	s.Lock()
	defer s.Unlock()
	return reflect.ValueOf(s.Miniredis).Elem().FieldByName("srv").IsNil()
}
