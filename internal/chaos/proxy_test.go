package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// echoServer echoes every byte back and reports each chunk it read on got.
type echoServer struct {
	ln  net.Listener
	got chan string
	wg  sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	es := &echoServer{ln: ln, got: make(chan string, 4096)}
	es.wg.Add(1)
	go func() {
		defer es.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			es.mu.Lock()
			es.conns = append(es.conns, c)
			es.mu.Unlock()
			es.wg.Add(1)
			go func() {
				defer es.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						select {
						case es.got <- string(buf[:n]):
						default: // a flood nobody inspects
						}
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		es.mu.Lock()
		for _, c := range es.conns {
			_ = c.Close()
		}
		es.mu.Unlock()
		es.wg.Wait()
	})
	return es
}

// await fails unless the server receives exactly want next (in one or more
// chunks) within 5 s.
func (es *echoServer) await(t *testing.T, want string) {
	t.Helper()
	var have string
	timeout := time.After(5 * time.Second)
	for len(have) < len(want) {
		select {
		case s := <-es.got:
			have += s
		case <-timeout:
			t.Fatalf("server received %.80q, want %q", have, want)
		}
	}
	if have != want {
		t.Fatalf("server received %.80q, want %q", have, want)
	}
}

// nothing fails if the server has received anything not yet awaited.
func (es *echoServer) nothing(t *testing.T) {
	t.Helper()
	select {
	case s := <-es.got:
		t.Fatalf("server received %.80q, want nothing", s)
	default:
	}
}

func newProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	p, err := NewProxy("127.0.0.1:0", upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

// receive reads len(want) bytes within 5 s and fails unless they are want.
func receive(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
}

// roundTrip sends msg through the proxy and expects it at the server and
// back.
func roundTrip(t *testing.T, es *echoServer, c net.Conn, msg string) {
	t.Helper()
	send(t, c, msg)
	es.await(t, msg)
	receive(t, c, msg)
}

// silent fails unless nothing arrives on c for d while it stays open. (A
// bounded wait: absence has no signal.)
func silent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want nothing for %v on an open connection", n, err, d)
	}
}

// closed reads c until it ends, within 5 s, and returns the read's error.
func closed(t *testing.T, c net.Conn) error {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the connection closed", n, err)
	}
	return err
}

func TestProxyForwards(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	a, b := dial(t, p), dial(t, p)
	roundTrip(t, es, a, "ping")
	roundTrip(t, es, b, "pong")

	// A megabyte both ways, read while it is written: no byte lost or
	// reordered across chunks.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	errc := make(chan error, 1)
	go func() { _, err := a.Write(big); errc <- err }()
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	back := make([]byte, len(big))
	if _, err := io.ReadFull(a, back); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, big) {
		t.Fatal("the echo of 1 MiB differs from what was sent")
	}
}

func TestProxyBlackHole(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, es, old, "before")

	p.BlackHole()
	send(t, old, "lost")
	silent(t, old, 100*time.Millisecond)
	fresh := dial(t, p) // accepted, but its requests go nowhere
	send(t, fresh, "lost too")
	silent(t, fresh, 100*time.Millisecond)
	es.nothing(t)

	p.Heal()
	_ = closed(t, old) // it held a swallowed request: closed, not left to time out
	_ = closed(t, fresh)
	roundTrip(t, es, dial(t, p), "after")
	es.nothing(t) // what was swallowed stays lost
}

func TestProxyDropReplies(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	old := dial(t, p)
	roundTrip(t, es, old, "before")

	p.DropReplies(0)
	send(t, old, "runs")
	es.await(t, "runs") // the request gets through
	fresh := dial(t, p)
	send(t, fresh, "runs too")
	es.await(t, "runs too")
	silent(t, old, 100*time.Millisecond) // its reply does not
	silent(t, fresh, time.Millisecond)

	p.Heal()
	_ = closed(t, old)
	_ = closed(t, fresh)
	roundTrip(t, es, dial(t, p), "after")
}

func TestProxyDropRepliesThenClose(t *testing.T) {
	const after = 200 * time.Millisecond
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	busy, idle := dial(t, p), dial(t, p)
	roundTrip(t, es, busy, "before")
	roundTrip(t, es, idle, "before")

	set := time.Now()
	p.DropReplies(after)
	fresh := dial(t, p)
	time.Sleep(after / 2) // the busy connection's reply comes mid-silence: it must restart the count
	sent := time.Now()
	send(t, busy, "runs")
	es.await(t, "runs")

	// Each connection closes after a silence of after: the busy one
	// counted from its dropped reply, the idle one from the fault, the
	// fresh one from its start.
	for _, tc := range []struct {
		name string
		c    net.Conn
		from time.Time
	}{{"busy", busy, sent}, {"idle", idle, set}, {"fresh", fresh, set}} {
		_ = closed(t, tc.c)
		if d := time.Since(tc.from); d < after || d > after+2*time.Second {
			t.Errorf("%s connection closed %v after its last reply or the fault's start, want about %v", tc.name, d, after)
		}
	}
	p.Heal()
	roundTrip(t, es, dial(t, p), "after")
}

func TestProxyCloseOnReply(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	busy, idle := dial(t, p), dial(t, p)
	roundTrip(t, es, busy, "before")
	roundTrip(t, es, idle, "before")

	p.CloseOnReply()
	fresh := dial(t, p)
	send(t, busy, "runs")
	es.await(t, "runs") // the request gets through
	if err := closed(t, busy); !errors.Is(err, io.EOF) {
		t.Errorf("the busy connection ended with %v, want EOF (closed, its reply dropped)", err)
	}
	send(t, fresh, "runs too")
	es.await(t, "runs too")
	_ = closed(t, fresh)
	silent(t, idle, 100*time.Millisecond) // no reply: left open
	p.Heal()
	_ = closed(t, idle) // open while replies were swallowed
	roundTrip(t, es, dial(t, p), "after")
}

func TestProxyLatency(t *testing.T) {
	const d = 300 * time.Millisecond
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, es, c, "warm")

	p.Latency(d)
	start := time.Now()
	roundTrip(t, es, c, "slow")
	if took := time.Since(start); took < d {
		t.Fatalf("round trip under latency %v took %v", d, took)
	}

	// Three replies arriving one after the other are each delayed by d
	// from their own arrival, in order, not by d plus the earlier delays.
	start = time.Now()
	for _, m := range []string{"a", "b", "c"} {
		send(t, c, m)
		es.await(t, m)
	}
	receive(t, c, "abc")
	if took := time.Since(start); took < d || took >= 2*d {
		t.Fatalf("three replies under latency %v took %v, want in [d, 2d)", d, took)
	}

	// Heal releases a held reply at once, and the connection carries on.
	p.Latency(time.Minute)
	send(t, c, "held")
	es.await(t, "held")
	healed := time.Now()
	p.Heal()
	receive(t, c, "held")
	if took := time.Since(healed); took > 5*time.Second {
		t.Fatalf("held reply came %v after Heal", took)
	}
	start = time.Now()
	roundTrip(t, es, c, "fast")
	if took := time.Since(start); took >= d {
		t.Fatalf("round trip after Heal took %v", took)
	}
}

func TestProxyResetConnections(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	used, idle := dial(t, p), dial(t, p)
	roundTrip(t, es, used, "before")
	roundTrip(t, es, idle, "before")

	p.ResetConnections()
	for name, c := range map[string]net.Conn{"open": used, "idle until now": idle, "fresh": dial(t, p)} {
		send(t, c, "dropped")
		if err := closed(t, c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s connection ended with %v, want a reset", name, err)
		}
	}
	es.nothing(t) // no request got through before the reset

	p.Heal()
	roundTrip(t, es, dial(t, p), "after")
}

func TestProxyForget(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, es, c, "before")

	p.Forget()
	fresh := dial(t, p)                // made after: not affected
	silent(t, c, 200*time.Millisecond) // half-open: no end, no reset, nothing
	send(t, c, "dropped")
	if err := closed(t, c); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the forgotten connection's next request ended it with %v, want a reset", err)
	}
	es.nothing(t) // it reached no server
	roundTrip(t, es, fresh, "after")
}

// A link stuck in a write (the client reads nothing, the server echoes a
// flood) is where Toxiproxy deadlocked removing a toxic: faults and Heal
// must still return at once, and so must Stop.
func TestProxyHealOnABusyLink(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	c := dial(t, p)
	flood := make([]byte, 64<<10)
	go func() { // ends when Stop closes the connection
		for {
			if _, err := c.Write(flood); err != nil {
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			p.Latency(time.Millisecond)
			p.Heal()
			p.ResetConnections()
			p.Heal()
		}
		p.DropReplies(time.Hour)
		p.BlackHole()
		p.Heal()
		p.Stop()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("fault changes, Heal or Stop blocked on a busy link")
	}
}

// Stop ends every goroutine of the Proxy, whatever its connections were
// doing: idle, holding a delayed reply, swallowing, flooded.
func TestProxyStopLeavesNoGoroutine(t *testing.T) {
	es := startEcho(t)
	p := newProxy(t, es.ln.Addr().String())
	var conns []net.Conn
	for range 4 {
		c := dial(t, p)
		roundTrip(t, es, c, "x")
		conns = append(conns, c)
	}
	p.Latency(time.Hour)
	send(t, conns[0], "held")
	es.await(t, "held")
	flood := make([]byte, 4<<20) // its echo, held and never read, stalls the link
	go func() { _, _ = conns[2].Write(flood) }()
	p.BlackHole()
	send(t, conns[1], "swallowed")
	if n := proxyGoroutines(); n == 0 {
		t.Fatal("no proxy goroutine found before Stop: the check below would prove nothing")
	}

	stopped := make(chan struct{})
	go func() { p.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("Stop still waits after 10 s:\n%s", buf[:runtime.Stack(buf, true)])
	}
	for _, i := range []int{0, 1, 3} { // 2 has its flood's echo to read first
		_ = closed(t, conns[i])
	}
	// Stop waited for them; one may still be unwinding past its last defer.
	deadline := time.Now().Add(2 * time.Second)
	for n := proxyGoroutines(); n > 0; n = proxyGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("%d proxy goroutines left after Stop:\n%s", n, stacks())
		}
		runtime.Gosched()
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("the listener still accepts after Stop")
	}
}

// stacks returns runtime.Stack's report of every goroutine, whatever its
// length.
func stacks() string {
	for buf := make([]byte, 1<<20); ; buf = make([]byte, 2*len(buf)) {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return string(buf[:n])
		}
	}
}

// proxyGoroutines counts the goroutines running a Proxy method.
func proxyGoroutines() int {
	count := 0
	for _, g := range strings.Split(stacks(), "\n\n") {
		if strings.Contains(g, "internal/chaos.(*Proxy).") {
			count++
		}
	}
	return count
}

// Through a Node, with go-redis and a real server: a command whose reply was
// dropped fails as soon as the node heals, not after its read timeout, and a
// fault cannot be switched on twice.
func TestNodeHealFailsASwallowedCommandAtOnce(t *testing.T) {
	ctx := context.Background()
	cl := Start(t, 1, Options{ClockNode: -1})
	n := cl.Nodes[0]
	c := cl.Clients(&redis.Options{MaxRetries: -1, ReadTimeout: time.Minute})[0]
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.DropReplies(); err != nil {
		t.Fatal(err)
	}
	if err := n.DropReplies(); err == nil {
		t.Fatal("DropReplies twice without a Heal succeeded")
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Set(ctx, "k", "v", 0).Err() }()
	for n.Admin.Get(ctx, "k").Val() != "v" {
		time.Sleep(time.Millisecond) // polling the server; it offers no signal
	}
	healed := time.Now()
	cl.Heal()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("SET whose reply was dropped succeeded")
		}
		if d := time.Since(healed); d > 5*time.Second {
			t.Fatalf("SET failed %v after Heal", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("SET whose reply was dropped still waits after Heal")
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Heal: %v", err)
	}
	if err := n.DropReplies(); err != nil {
		t.Fatalf("DropReplies after Heal: %v", err)
	}
	cl.Heal()
}
