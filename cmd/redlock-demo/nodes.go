// The masters the demo runs against: five embedded in-process ones, or real
// ones given with -nodes.

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/redlocktest"
)

// masters is the set of Redis masters the demo runs against: five embedded
// in-process servers by default, or real ones given with -nodes.
type masters struct {
	addrs   []string
	clients []redis.UniversalClient

	embedded *redlocktest.Masters // nil for real masters
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

// embeddedMasters starts n in-process masters (redlocktest's), a
// deployment that has run for a while: their memory markers (the restart
// guard's, see docs/restarts.md) are old, so a master down keeps no lock
// out, and one restarted empty sits the guard out.
func embeddedMasters(n int) (*masters, error) {
	e, err := redlocktest.Run(n)
	if err != nil {
		return nil, fmt.Errorf("start the embedded masters: %w", err)
	}
	m := &masters{embedded: e, addrs: e.Addrs()}
	m.connect()
	return m, nil
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

// stop takes embedded master i down: it refuses connections until
// startEmpty.
func (m *masters) stop(i int) { m.embedded.Down(i) }

// startEmpty brings embedded master i back on its address without its data,
// as a master without persistence comes back: the restart guard sets its
// votes aside until its new memory is older than the guard.
func (m *masters) startEmpty(i int) { m.embedded.LoseData(i) }

func (m *masters) close() {
	for _, c := range m.clients {
		_ = c.Close()
	}
	if m.embedded != nil {
		m.embedded.Close()
	}
}
