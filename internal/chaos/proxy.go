// This file holds Proxy, the fault suite's TCP proxy: it stands between the
// clients and one redis-server and can swallow requests or replies, delay
// replies, reset connections, and heal, on connections already open as on
// new ones. It uses the standard library only.

package chaos

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A Proxy forwards every connection accepted on its listener to one
// upstream address, through the faults in force. "Up" is the client-to-server
// direction (requests), "down" the server-to-client one (replies).
//
// Each connection has four goroutines: per direction a reader, which reads
// a chunk, looks at the faults in force when it arrived and drops it, resets
// the connection or queues it, and a writer, which holds a queued chunk for
// the latency in force and writes it. A fault thus applies to an open
// connection from its next chunk on, and a reader never waits on a writer's
// delay, so every reply is delayed by the latency, not by the ones before it.
//
// Fault changes never wait on a connection. Stop ends every goroutine of the
// Proxy before it returns.
type Proxy struct {
	ln       net.Listener
	upstream string
	dialer   net.Dialer
	ctx      context.Context // ended by Stop, aborting a dial in progress
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the accept loop and every connection's goroutines

	faults atomic.Pointer[faultState] // read per chunk; replaced under mu

	mu      sync.Mutex // guards conns and stopped; serialises fault changes
	conns   map[*proxyConn]struct{}
	stopped bool
}

// faultState is the set of faults in force. It is never modified once
// published: a change stores a new one and closes the old one's changed.
type faultState struct {
	blackHole    bool          // up chunks are discarded
	dropReplies  bool          // down chunks are discarded
	closeAfter   time.Duration // with dropReplies, >0: a connection closes after this long without a reply
	closeOnReply bool          // a connection is closed, its reply dropped, by its next down chunk
	latency      time.Duration // down chunks are written this long after they arrived
	reset        bool          // a connection is reset by its next up chunk
	changed      chan struct{} // closed when this state is replaced
}

// swallows reports whether f discards bytes in some direction.
func (f *faultState) swallows() bool { return f.blackHole || f.dropReplies || f.closeOnReply }

// A chunk is what one Read returned, with when it arrived.
type chunk struct {
	data []byte
	at   time.Time
}

// A proxyConn is one client connection and its connection to the upstream.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once
	forgotten      atomic.Bool // Forget: the upstream side is closed, the client's left open and silent
}

// NewProxy listens on listen (such as "127.0.0.1:0") and forwards every
// connection to upstream, without faults until one is set. A client whose
// upstream dial fails has its connection closed. Stop ends it.
func NewProxy(listen, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[*proxyConn]struct{}{}}
	p.dialer.Timeout = 5 * time.Second
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.faults.Store(&faultState{changed: make(chan struct{})})
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the Proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// BlackHole discards every request byte from now on; connections stay open
// and new ones are accepted, but nothing reaches the upstream.
func (p *Proxy) BlackHole() { p.change(func(f *faultState) { f.blackHole = true }) }

// DropReplies discards every reply byte from now on while requests still
// reach the upstream. With closeAfter > 0 a connection is also closed once
// closeAfter has passed without a reply discarded on it, counted from now for
// the connections open and from their start for new ones (Toxiproxy's
// timeout toxic); the shortest closeAfter set since the last Heal wins.
func (p *Proxy) DropReplies(closeAfter time.Duration) {
	p.change(func(f *faultState) {
		f.dropReplies = true
		if closeAfter > 0 && (f.closeAfter == 0 || closeAfter < f.closeAfter) {
			f.closeAfter = closeAfter
		}
	})
}

// CloseOnReply makes every connection that carries a reply from now on,
// open or new, drop it and close: the request ran upstream, and the client
// learns nothing of it but the closed connection, from which go-redis
// re-sends the command on a new one. Connections that carry no reply stay
// as they are.
func (p *Proxy) CloseOnReply() { p.change(func(f *faultState) { f.closeOnReply = true }) }

// Latency makes every reply chunk wait d from its arrival before it is
// forwarded, in order, without jitter; it replaces an earlier latency.
func (p *Proxy) Latency(d time.Duration) { p.change(func(f *faultState) { f.latency = d }) }

// ResetConnections makes every connection that carries a request from now
// on, open or new, drop it and end with a TCP reset on both sides. Idle
// connections stay as they are until they are used.
func (p *Proxy) ResetConnections() { p.change(func(f *faultState) { f.reset = true }) }

// Forget makes every open connection half-open, as a server whose host
// rebooted, or a NAT or load balancer that dropped the flow, leaves it: the
// upstream side is closed (the server drops that client, and its
// subscriptions with it), while the client's side stays open and carries
// nothing; the client's next request there gets a TCP reset. A client that
// only reads never learns of it, until TCP keep-alive does. New
// connections are not affected, and Heal does not revive these.
func (p *Proxy) Forget() {
	p.mu.Lock()
	conns := p.openConns()
	p.mu.Unlock()
	for _, c := range conns {
		c.forgotten.Store(true)
		_ = c.server.Close()
	}
}

// Heal removes every fault at once, without waiting on any connection.
// Delayed replies are forwarded at once. Connections open while bytes were
// being swallowed (BlackHole, DropReplies) are closed, as removing
// Toxiproxy's timeout toxic closed them, so that a client waiting for a reply
// that will never come gets an error instead of its read timeout; the others
// carry on. Bytes swallowed earlier are lost.
func (p *Proxy) Heal() {
	p.mu.Lock()
	old := p.swap(faultState{})
	var closing []*proxyConn
	if old.swallows() {
		closing = p.openConns()
	}
	p.mu.Unlock()
	for _, c := range closing {
		c.close()
	}
}

// Stop closes the listener and every connection and returns once every
// goroutine of the Proxy has ended. Calling it again only waits.
func (p *Proxy) Stop() {
	p.mu.Lock()
	first := !p.stopped
	p.stopped = true
	conns := p.openConns()
	p.mu.Unlock()
	if first {
		p.cancel()
		_ = p.ln.Close()
		for _, c := range conns {
			c.close()
		}
	}
	p.wg.Wait()
}

// change applies edit to a copy of the faults in force and publishes it.
func (p *Proxy) change(edit func(*faultState)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := *p.faults.Load()
	edit(&next)
	old := p.swap(next)
	if next.closeAfter != old.closeAfter {
		// Counted from now on the open connections; a Read already
		// blocked honours the new deadline.
		for c := range p.conns {
			_ = c.server.SetReadDeadline(time.Now().Add(next.closeAfter))
		}
	}
}

// swap publishes next and wakes whoever waits on the old state. p.mu must
// be held.
func (p *Proxy) swap(next faultState) (old *faultState) {
	next.changed = make(chan struct{})
	old = p.faults.Swap(&next)
	close(old.changed)
	return old
}

// openConns lists the registered connections. p.mu must be held.
func (p *Proxy) openConns() []*proxyConn {
	out := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

// accept serves the listener until Stop closes it.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed by Stop; a TCP listener has no other lasting error here
		}
		server, err := p.dialer.DialContext(p.ctx, "tcp", p.upstream)
		if err != nil {
			_ = client.Close() // upstream down: the client sees its connection end
			continue
		}
		p.serve(client, server)
	}
}

// serve registers the connection pair and starts its four goroutines,
// unless the Proxy has stopped.
func (p *Proxy) serve(client, server net.Conn) {
	c := &proxyConn{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	if f := p.faults.Load(); f.closeAfter > 0 {
		_ = server.SetReadDeadline(time.Now().Add(f.closeAfter))
	}
	p.wg.Add(4)
	p.mu.Unlock()
	up, down := make(chan chunk, 64), make(chan chunk, 64)
	go p.read(c, client, up, false)
	go p.write(c, server, up, false)
	go p.read(c, server, down, true)
	go p.write(c, client, down, true)
}

// read reads src chunk by chunk and, by the faults in force when each
// arrives, drops it, resets the connection, or queues it on out. It closes
// out when src ends (EOF, error, closeAfter's deadline, or close), leaving
// the writer to forward what is queued and close the connection.
func (p *Proxy) read(c *proxyConn, src net.Conn, out chan<- chunk, down bool) {
	defer p.wg.Done()
	defer close(out)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f := p.faults.Load()
			switch {
			case !down && (f.reset || c.forgotten.Load()):
				c.reset()
				return
			case !down && f.blackHole:
			case down && f.closeOnReply:
				c.close()
				return
			case down && f.dropReplies:
				if f.closeAfter > 0 {
					_ = src.SetReadDeadline(time.Now().Add(f.closeAfter))
				}
			default:
				select {
				case out <- chunk{data: bytes.Clone(buf[:n]), at: time.Now()}:
				case <-c.done:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// write forwards the chunks queued on in to dst, each once the latency in
// force has passed since it arrived (down only), and closes the connection
// when in ends or a write fails. It returns at once when the connection is
// closed.
func (p *Proxy) write(c *proxyConn, dst net.Conn, in <-chan chunk, down bool) {
	defer p.wg.Done()
	defer func() {
		if !down || !c.forgotten.Load() { // forgotten: the client's side stays open, silent
			c.close()
		}
	}()
	for ch := range in {
		if down && !p.delay(c, ch.at) {
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}

// delay waits until a chunk that arrived at is due under the latency in
// force, looking again whenever the faults change (so that Heal releases it
// at once). It reports false if the connection was closed meanwhile.
func (p *Proxy) delay(c *proxyConn, at time.Time) bool {
	for {
		f := p.faults.Load()
		wait := time.Until(at.Add(f.latency))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return true
		case <-f.changed:
			t.Stop()
		case <-c.done:
			t.Stop()
			return false
		}
	}
}

// close closes both sides of the connection and unregisters it; only the
// first call does anything. The caller must not hold p.mu.
func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.server.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// reset closes both sides with SO_LINGER 0, so that each peer gets a TCP
// reset rather than an orderly end.
func (c *proxyConn) reset() {
	for _, nc := range []net.Conn{c.client, c.server} {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	c.close()
}
