// The masters the demo runs against: five embedded in-process ones, or real
// ones given with -nodes.

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/mini"
)

// masters is the set of Redis masters the demo runs against: five embedded
// in-process servers by default, or real ones given with -nodes.
type masters struct {
	addrs   []string
	clients []redis.UniversalClient

	embedded []*mini.Server // nil for real masters
}

func init() {
	// go-redis logs every failed dial; with masters stopped on purpose that
	// drowns the timeline, and the demo reports failures itself.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// clientOptions keeps a stopped master cheap to ask: no retries, short dials.
var clientOptions = redis.Options{
	MaxRetries:   -1,
	DialTimeout:  200 * time.Millisecond,
	ReadTimeout:  time.Second,
	WriteTimeout: time.Second,
}

func embeddedMasters(n int) (*masters, error) {
	m := &masters{}
	for range n {
		s, err := mini.Run()
		if err != nil {
			m.close()
			return nil, fmt.Errorf("start embedded master: %w", err)
		}
		m.embedded = append(m.embedded, s)
		m.addrs = append(m.addrs, s.Addr())
	}
	m.connect()
	if err := m.establish(); err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

// establish makes the embedded masters a deployment that has run for an
// hour: their memory markers (the restart guard's, see the README) say
// their memory began then. In a fresh deployment a master down keeps every
// lock out until the markers are older than the guard, since the missing
// master could be the one that remembers; a restarted master, whose memory
// is new, sits the guard out.
func (m *masters) establish() error {
	ctx := context.Background()
	for _, c := range m.clients {
		now, err := c.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("embedded master: %w", err)
		}
		born := now.Add(-time.Hour).UnixMilli()
		if err := c.Set(ctx, "redlock:memory", fmt.Sprintf("%d 0", born), 0).Err(); err != nil {
			return fmt.Errorf("embedded master: %w", err)
		}
	}
	return nil
}

func realMasters(list string) (*masters, error) {
	m := &masters{}
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			m.addrs = append(m.addrs, a)
		}
	}
	if len(m.addrs) == 0 {
		return nil, fmt.Errorf("-nodes: no addresses in %q", list)
	}
	m.connect()
	return m, nil
}

func (m *masters) connect() {
	for _, a := range m.addrs {
		o := clientOptions
		o.Addr = a
		m.clients = append(m.clients, redis.NewClient(&o))
	}
}

// stop takes embedded master i down: it refuses connections until start.
func (m *masters) stop(i int) { m.embedded[i].Close() }

// startEmpty brings embedded master i back on its address without its data,
// as a master without persistence comes back: the restart guard sets its
// votes aside until its new memory is older than the guard.
func (m *masters) startEmpty(i int) error {
	m.embedded[i].FlushAll()
	return m.embedded[i].Restart()
}

func (m *masters) close() {
	for _, c := range m.clients {
		_ = c.Close()
	}
	for _, s := range m.embedded {
		s.Close()
	}
}
