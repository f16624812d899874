// Package redistest starts real redis-server processes for tests: each on a
// free loopback port with its own temporary directory, stopped by its own
// PID when the test ends. It can pause (SIGSTOP), resume, kill and restart a
// server, which is what the integration and fault-injection tests need.
//
// A missing redis-server binary fails the test rather than skipping it: a
// suite that silently skips its real-server tier proves nothing. Set
// REDIS_SERVER to use a binary that is not on PATH.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SkipShort skips the test under go test -short: the real-server tiers are
// not part of the inner loop.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("real redis-server: skipped with -short")
	}
}

// Binary returns the redis-server binary to run, or an error that says how
// to install it.
func Binary() (string, error) {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b, nil
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set REDIS_SERVER")
	}
	return b, nil
}

// A Server is one redis-server process.
type Server struct {
	Addr string // 127.0.0.1:port
	Dir  string // its working directory (RDB/AOF files)

	t     testing.TB
	bin   string
	args  []string // the arguments it was started with
	env   []string // extra environment, e.g. LD_PRELOAD
	mu    sync.Mutex
	cmd   *exec.Cmd
	exit  chan struct{} // closed when cmd has exited
	pause bool
}

// Start starts one server. extra are further redis-server arguments, such
// as "--appendonly", "yes". The server is killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartEnv(t, nil, extra...)
}

// StartEnv is Start with extra environment variables ("NAME=value") for the
// process, kept across restarts; the fault suite preloads libfaketime this
// way.
func StartEnv(t testing.TB, env []string, extra ...string) *Server {
	t.Helper()
	SkipShort(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir(), env: env}
	s.startOnAFreePort("redis-server", func(port string) []string {
		return append([]string{
			"--port", port, "--bind", "127.0.0.1",
			"--dir", s.Dir, "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--daemonize", "no", "--logfile", "redis.log",
			"--enable-debug-command", "local",
		}, extra...)
	})
	return s
}

// startOnAFreePort starts the process with args(port) on a free loopback
// port, trying again when the port was taken between probe and bind, and
// kills it when the test ends; it fails the test if it cannot.
func (s *Server) startOnAFreePort(what string, args func(port string) []string) {
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			s.t.Fatal(err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.args = args(strconv.Itoa(port))
		if lastErr = s.start(s.args); lastErr == nil {
			s.t.Cleanup(s.kill)
			return
		}
	}
	s.t.Fatalf("redistest: could not start %s: %v", what, lastErr)
}

// StartN starts n independent servers.
func StartN(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	ss := make([]*Server, n)
	for i := range ss {
		ss[i] = Start(t, extra...)
	}
	return ss
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the process with args and waits until it answers PING.
func (s *Server) start(args []string) error {
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.Dir
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	s.mu.Lock()
	s.cmd, s.exit, s.pause = cmd, exit, false
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exit:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s exited: %s", s.Addr, log)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING: %w", s.Addr, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a process we do not control; no signal exists
	}
}

// Client returns a go-redis client for the server with go-redis's default
// options (3 s read timeout, 3 retries) unless opt says otherwise; opt.Addr
// is filled in. The client is closed when the test ends.
func (s *Server) Client(opt *redis.Options) *redis.Client {
	o := redis.Options{}
	if opt != nil {
		o = *opt
	}
	o.Addr = s.Addr
	c := redis.NewClient(&o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Clients returns Client(nil) of each of servers, in their order: an
// admin's view of every master.
func Clients(servers []*Server) []*redis.Client {
	cs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		cs[i] = s.Client(nil)
	}
	return cs
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGSTOP:
		s.pause = true
	case syscall.SIGCONT:
		s.pause = false
	}
}

// Pause stops the process with SIGSTOP: it keeps its sockets and data but
// answers nothing, like a hung or swapped-out server.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL and waits for it. Its data is lost
// unless it was persisted.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exit, paused := s.cmd, s.exit, s.pause
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if paused {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Kill()
	<-exit
}

// Restart kills the server and starts it again on the same port and
// directory, with the arguments it was started with plus extra for this run
// only (later arguments win, so "--appendonly", "yes" overrides the default).
// Unless persistence is on, the restarted server has forgotten every key.
func (s *Server) Restart(extra ...string) {
	s.t.Helper()
	s.kill()
	if err := s.start(append(append([]string(nil), s.args...), extra...)); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Stopped reports whether the process is not running (killed and not
// restarted).
func (s *Server) Stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd == nil
}

// WipeData removes the server's persistence files (RDB and AOF); call it
// while the server is stopped, so that the next start begins empty.
func (s *Server) WipeData() error {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == "redis.log" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.Dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// CommandCalls returns, by command name, how many calls the server behind c
// counted (INFO commandstats): commands run inside scripts included.
func CommandCalls(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		name, stats, ok2 := strings.Cut(rest, ":")
		if !ok || !ok2 {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(stats, "calls=%d", &n); err == nil {
			calls[name] = n
		}
	}
	return calls, nil
}
