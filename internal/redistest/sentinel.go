// Sentinels: redis-server in sentinel mode, for failover clients.

package redistest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Sentinel is one redis-server process in sentinel mode. One sentinel can
// monitor several masters, each under its own name.
type Sentinel struct {
	*Server
}

// StartSentinel starts a sentinel that monitors nothing yet; Monitor adds
// masters. It is killed when the test ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	SkipShort(t)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, bin: bin, Dir: t.TempDir()}
	// Sentinel mode needs a configuration file it can rewrite.
	conf := filepath.Join(s.Dir, "sentinel.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s.startOnAFreePort("a sentinel", func(port string) []string {
		return []string{
			conf, "--sentinel", "--port", port, "--bind", "127.0.0.1",
			"--dir", s.Dir, "--protected-mode", "no", "--daemonize", "no", "--logfile", "redis.log",
		}
	})
	return &Sentinel{s}
}

// Monitor makes the sentinel watch master under name (quorum 1) and returns
// once the sentinel names master's address for it, so that a failover
// client can be used at once.
func (s *Sentinel) Monitor(name string, master *Server) {
	s.t.Helper()
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		s.t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.Monitor(ctx, name, host, port, "1").Err(); err != nil {
		s.t.Fatalf("redistest: SENTINEL MONITOR %s %s: %v", name, master.Addr, err)
	}
	addr, err := sc.GetMasterAddrByName(ctx, name).Result()
	if err != nil || len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != master.Addr {
		s.t.Fatalf("redistest: sentinel names %v (%v) for %s, want %s", addr, err, name, master.Addr)
	}
}
