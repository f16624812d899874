// Package memredis is a small in-process Redis-compatible server for tests
// and demos: string keys with expiry, Lua scripts (EVAL/EVALSHA, through
// gopher-lua), pub/sub and the handshake go-redis v9 performs, spoken as
// RESP2 over TCP on a loopback port. It serves exactly what this module
// needs, and nothing else: see the command table in commands.go.
//
// server.go holds the Server, its listener and connections (one goroutine
// reading commands and one writing replies per connection), and the
// dispatch of client commands.
package memredis

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// numDBs is how many databases SELECT can choose from, as in Redis.
const numDBs = 16

// A Server is one in-process Redis. All its methods are safe for concurrent
// use. Commands run one at a time under a single lock, so scripts are atomic.
type Server struct {
	addr string // set by Run, reused by Restart
	wg   sync.WaitGroup

	mu       sync.Mutex // guards everything below
	ln       net.Listener
	conns    map[*conn]struct{}
	nextID   int64
	runID    string
	started  time.Time
	dbs      [numDBs]map[string]entry
	offset   time.Duration // added to the clock by FastForward
	frozen   time.Time     // the clock's base once FreezeClock stopped it
	scripts  map[string]*lua.FunctionProto
	channels map[string]map[*conn]struct{}
	errMsg   string
	hook     func(cmd string, args []string) error
	count    int
}

// Run starts a server on 127.0.0.1 with a free port.
func Run() (*Server, error) {
	s := &Server{
		conns:    map[*conn]struct{}{},
		scripts:  map[string]*lua.FunctionProto{},
		channels: map[string]map[*conn]struct{}{},
	}
	for i := range s.dbs {
		s.dbs[i] = map[string]entry{}
	}
	s.addr = "127.0.0.1:0"
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// RunT starts a server, failing t if it cannot, and closes it when the test
// ends.
func RunT(t testing.TB) *Server {
	t.Helper()
	s, err := Run()
	if err != nil {
		t.Fatalf("memredis: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// listen binds s.addr and starts accepting; it gives the server a new
// run_id, as a restarted redis-server has.
func (s *Server) listen() error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	id := make([]byte, 20)
	_, _ = rand.Read(id)
	s.mu.Lock()
	s.ln, s.addr, s.runID, s.started = ln, ln.Addr().String(), hex.EncodeToString(id), time.Now()
	s.errMsg = ""
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Close stops listening, closes every connection and returns once all the
// server's goroutines have ended. A pre-hook that is blocking a command
// (SetPreHook) delays Close until it returns. The data is kept for Restart.
func (s *Server) Close() {
	s.mu.Lock()
	if s.ln != nil {
		_ = s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Restart listens again on the address of a closed server, keeping its
// data and scripts, as a master with persistence would come back. Its
// run_id changes, and an error set by SetError is cleared.
func (s *Server) Restart() error {
	s.mu.Lock()
	running := s.ln != nil
	s.mu.Unlock()
	if running {
		return errors.New("memredis: Restart of a running server")
	}
	return s.listen()
}

func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.ln != ln { // closed meanwhile: Close did not see this one
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		s.nextID++
		c := &conn{s: s, nc: nc, id: s.nextID, wake: make(chan struct{}, 1), done: make(chan struct{})}
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go c.serve()
		go c.writeLoop()
	}
}

// SetPreHook sets h to be called with each client command's upper-cased
// name and its arguments before the command runs, on the connection's
// goroutine and without the server's lock, so h may block to hold the
// command (and every later one on that connection). When h returns an
// error, its text is the reply (e.g. "ERR disk on fire") and the command
// does not run. Commands run by scripts do not pass through h. nil removes
// the hook.
func (s *Server) SetPreHook(h func(cmd string, args []string) error) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// SetError makes every client command reply with the error msg (such as
// "LOADING Redis is loading the dataset in memory") until SetError("").
func (s *Server) SetError(msg string) {
	s.mu.Lock()
	s.errMsg = msg
	s.mu.Unlock()
}

// CommandCount returns how many client commands the server has run, as
// miniredis counts them: commands answered by SetError or a pre-hook's
// error, unknown commands and commands run by scripts are not counted.
func (s *Server) CommandCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// dispatch runs one client command and queues its reply. It returns false
// when the connection is to end (QUIT).
func (s *Server) dispatch(c *conn, args []string) bool {
	name := strings.ToUpper(args[0])
	s.mu.Lock()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(name, args[1:]); err != nil {
			c.send(appendReply(nil, errReply(err.Error())))
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Queued under the lock, so that no message published after this
	// command can overtake its reply.
	c.send(appendReply(nil, s.execClient(c, name, args)))
	return name != "QUIT"
}

// A conn is one client connection, or the pseudo-client a script's
// commands run as (nc nil).
type conn struct {
	s    *Server
	nc   net.Conn
	id   int64
	db   int
	name string
	subs map[string]bool // subscribed channels; guarded by s.mu

	declared map[string]bool // a script's pseudo-client: the keys it declared (KEYS)

	outMu sync.Mutex
	out   []byte        // replies not yet written
	wake  chan struct{} // signals writeLoop that out has grown
	done  chan struct{} // closed when serve has ended
}

// serve reads and runs commands until the connection fails or QUITs.
func (c *conn) serve() {
	defer c.s.wg.Done()
	defer c.finish()
	r := bufio.NewReader(c.nc)
	for {
		args, err := readCommand(r)
		if err != nil {
			var pe protocolError
			if errors.As(err, &pe) {
				c.send(appendReply(nil, errReply("ERR Protocol error: "+string(pe))))
			}
			return
		}
		if len(args) > 0 && !c.s.dispatch(c, args) {
			return
		}
	}
}

// finish forgets the connection and lets writeLoop drain and close it.
func (c *conn) finish() {
	c.s.mu.Lock()
	c.s.unsubscribeAll(c)
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	close(c.done)
}

// send queues b for writeLoop; it never blocks on the network.
func (c *conn) send(b []byte) {
	c.outMu.Lock()
	c.out = append(c.out, b...)
	c.outMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes queued replies until serve has ended and all are
// written, or writing fails; then it closes the connection.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	defer c.nc.Close()
	for {
		ended := false
		select {
		case <-c.wake:
		case <-c.done:
			ended = true
		}
		c.outMu.Lock()
		b := c.out
		c.out = nil
		c.outMu.Unlock()
		if len(b) > 0 {
			if _, err := c.nc.Write(b); err != nil {
				return
			}
		} else if ended {
			return
		}
	}
}
