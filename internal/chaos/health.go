// Health: what the schedule did to each node, and since when, for the
// checkers that ask which faults a window saw.

package chaos

import (
	"fmt"
	"strings"
	"time"
)

func (s *Schedule) note(format string, args ...any) {
	if s.opt.History != nil {
		s.opt.History.Note(format, args...)
	}
}

// Health is every node's fault at one moment; Since compares it with later.
type Health []nodeFault

// Health returns the nodes' faults now.
func (s *Schedule) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(Health(nil), s.nodes...)
}

// Faults returns each node's fault in h.
func (h Health) Faults() []Fault {
	out := make([]Fault, len(h))
	for i, n := range h {
		out[i] = n.fault
	}
	return out
}

// Since returns, for each node, the one fault it has had all along since h
// was taken (Healthy if none), or Varied if its fault changed meanwhile or
// it had restarted less than Settle before.
func (s *Schedule) Since(h Health) []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Fault, len(h))
	for i, n := range h {
		out[i] = n.fault
		if s.nodes[i].epoch != n.epoch || time.Since(n.restarted) < s.opt.Settle || time.Since(n.reborn) < s.opt.Quarantine {
			out[i] = Varied
		}
	}
	return out
}

// Reachable returns, for each node, whether it has been up and reachable
// all along since h was taken: no network or process fault, and no restart
// less than Settle before. Configuration faults may have come and gone.
func (s *Schedule) Reachable(h Health) []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(h))
	for i, n := range h {
		out[i] = s.nodes[i].hard == n.hard && (n.fault == Healthy || n.fault.Configuration()) &&
			time.Since(n.restarted) >= s.opt.Settle
	}
	return out
}

// String summarises what the schedule did so far.
func (s *Schedule) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	total := 0
	for f := Fault(1); f < numFaults; f++ {
		total += s.counts[f]
		fmt.Fprintf(&b, ", %s %d", f, s.counts[f])
	}
	return fmt.Sprintf("%d faults (%d majority episodes)%s", total, s.episodes, b.String())
}
