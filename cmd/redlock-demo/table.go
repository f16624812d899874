// The operators' table: per master, the votes it gave, its refusals,
// timeouts and errors, and its reply latency, gathered with the library's
// Observer hook.

package main

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// masterStats counts every master's replies, for one phase or the whole run.
type masterStats struct {
	mu    sync.Mutex
	addrs []string
	rows  []masterRow
}

type masterRow struct {
	votes, refusals, timeouts, errors int
	latencies                         []time.Duration // of the replies that came in (not the timeouts)
}

func newMasterStats(addrs []string) *masterStats {
	return &masterStats{addrs: addrs, rows: make([]masterRow, len(addrs))}
}

// observer feeds s from every reply of every master.
func (s *masterStats) observer() redlock.Observer {
	return redlock.Observer{NodeReply: s.reply}
}

func (s *masterStats) reply(e redlock.NodeReplyEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Node < 0 || e.Node >= len(s.rows) {
		return
	}
	r := &s.rows[e.Node]
	switch e.Outcome {
	case redlock.NodeYes:
		r.votes++
	case redlock.NodeRefused:
		r.refusals++
	case redlock.NodeTimeout:
		r.timeouts++
		return
	case redlock.NodeFailed:
		r.errors++
	default:
		return // the caller gave up: says nothing of the master
	}
	r.latencies = append(r.latencies, e.Latency)
}

// take returns the rows counted since the last take, and starts afresh.
func (s *masterStats) take() []masterRow {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := s.rows
	s.rows = make([]masterRow, len(s.addrs))
	return rows
}

// add folds rows into s.
func (s *masterStats) add(rows []masterRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range rows {
		t := &s.rows[i]
		t.votes += r.votes
		t.refusals += r.refusals
		t.timeouts += r.timeouts
		t.errors += r.errors
		t.latencies = append(t.latencies, r.latencies...)
	}
}

// print writes rows as the operators' table, indented by indent.
func (s *masterStats) print(w io.Writer, indent string, rows []masterRow) {
	fmt.Fprintf(w, "%s%-22s %7s %9s %9s %7s %10s %10s\n", indent, "master", "votes", "refusals", "timeouts", "errors", "p50", "p99")
	for i, r := range rows {
		p50, p99 := "-", "-"
		if len(r.latencies) > 0 {
			l := slices.Clone(r.latencies)
			slices.Sort(l)
			p50, p99 = pct(l, 50).Round(10*time.Microsecond).String(), pct(l, 99).Round(10*time.Microsecond).String()
		}
		fmt.Fprintf(w, "%s%-22s %7d %9d %9d %7d %10s %10s\n", indent, s.addrs[i], r.votes, r.refusals, r.timeouts, r.errors, p50, p99)
	}
}
