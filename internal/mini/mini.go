// Package mini runs in-process Redis masters on miniredis
// (github.com/alicebob/miniredis/v2) for the fast test tier, the embedded
// demo, the examples and redlocktest. A Server is a *miniredis.Miniredis
// with what those need on top:
//
//   - TTLs that run with the server's clock (miniredis's ClockTTL): in real
//     time, or frozen by FreezeClock and moved only by FastForward, which
//     moves TIME and every TTL together;
//   - a pre-hook that sees the client's commands only, never the commands
//     a script runs (SetPreHook), and SetError beside it;
//   - INFO's run_id, which changes on Restart as a restarted redis-server's
//     does;
//   - CommandCount of the client's commands only.
//
// It serves what the library's scripts need; Redis Cluster, Sentinel and
// ACLs are out of its reach (the real-master tiers test those).
package mini

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// A Server is one in-process master. Its methods are safe for concurrent
// use; miniredis's own (Get, Set, Exists, TTL, SetTTL, Keys, FlushAll,
// PubSubNumSub, Addr, Close…) are promoted, and those below replace the
// ones whose contract differs.
type Server struct {
	*miniredis.Miniredis

	mu     sync.Mutex // guards the fields below
	hook   func(cmd string, args []string) error
	errMsg string
	runID  string
	port   string // Restart listens on it again
	frozen bool
	now    time.Time // the frozen clock
	count  int
}

// Run starts a server on 127.0.0.1 with a free port, its clock running in
// real time.
func Run() (*Server, error) {
	s := &Server{Miniredis: miniredis.NewMiniRedis(), runID: newRunID()}
	s.ClockTTL(true)
	if err := s.Start(); err != nil {
		return nil, fmt.Errorf("mini: %w", err)
	}
	s.port = s.Port()
	s.Server().SetPreHook(s.preHook)
	return s, nil
}

// RunT starts a server, failing t if it cannot, and closes it when the test
// ends.
func RunT(t testing.TB) *Server {
	t.Helper()
	s, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Restart listens again on the address of a closed server, keeping its
// data, as a master with persistence comes back. Its run_id changes, and an
// error set by SetError is cleared; a pre-hook stays.
func (s *Server) Restart() error {
	s.mu.Lock()
	s.runID = newRunID()
	s.errMsg = ""
	s.mu.Unlock()
	if err := s.Miniredis.Restart(); err != nil {
		return fmt.Errorf("mini: %w", err)
	}
	s.Server().SetPreHook(s.preHook)
	return nil
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
// It is checked before the pre-hook.
func (s *Server) SetError(msg string) {
	s.mu.Lock()
	s.errMsg = msg
	s.mu.Unlock()
}

// CommandCount returns how many client commands reached the server's
// command table: commands answered by SetError or a pre-hook's error, and
// commands run by scripts, are not counted.
func (s *Server) CommandCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// FreezeClock stops the server's clock: from then on TIME and every TTL
// move only by FastForward, so TTL returns exactly the TTL set less what
// was fast-forwarded, and no key expires by itself.
func (s *Server) FreezeClock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.frozen {
		s.frozen, s.now = true, time.Now()
		s.SetTime(s.now)
	}
}

// FastForward moves the server's clock on by d: keys whose TTL it passes
// expire. On a frozen clock TIME moves too; on a running one only the TTLs
// do.
func (s *Server) FastForward(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.frozen {
		s.Miniredis.FastForward(d)
		return
	}
	s.now = s.now.Add(d)
	s.SetTime(s.now)
}

// preHook is the miniredis server's pre-hook: SetError's reply, then the
// test's hook, then INFO with a run_id; it passes a script's commands
// through untouched. It reads nothing of the miniredis server, which Close
// takes away while commands may still be in flight.
func (s *Server) preHook(p *server.Peer, cmd string, args ...string) bool {
	if fromScript(p) {
		return false
	}
	s.mu.Lock()
	h, msg, runID, port := s.hook, s.errMsg, s.runID, s.port
	s.mu.Unlock()
	if msg != "" {
		p.WriteError(msg)
		return true
	}
	if h != nil {
		if err := h(cmd, args); err != nil {
			p.WriteError(err.Error())
			return true
		}
	}
	s.mu.Lock()
	s.count++
	s.mu.Unlock()
	if cmd == "INFO" {
		p.WriteBulk(fmt.Sprintf("# Server\r\nredis_version:7.2.0\r\nredis_mode:standalone\r\nrun_id:%s\r\ntcp_port:%s\r\n",
			runID, port))
		return true
	}
	return false
}

// fromScript reports whether p is the pseudo-client a script's commands run
// as: miniredis marks its connection context nested. The field is not
// exported; TestScriptCommandsBypassTheHook fails if a miniredis release
// renames it.
func fromScript(p *server.Peer) bool {
	if p.Ctx == nil {
		return false
	}
	v := reflect.ValueOf(p.Ctx)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("nested")
	return f.IsValid() && f.Kind() == reflect.Bool && f.Bool()
}

func newRunID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
