// Scenario 18: a contending load under a seeded random fault schedule.

package engine

import (
	"fmt"
	"time"
)

// soak runs the load ld under the random fault schedule, then checks it.
func soak(s *scenario, ld *load) {
	length := soakLength()
	faults := s.faultSchedule(length)
	acquired, failed := ld.Stop()
	s.t.Logf("soak %v: %d faults, %d acquisitions, %d Lock calls ended by the soak's end or a fault", length, faults, acquired, failed)
	if acquired == 0 {
		s.t.Fatal("no acquisition during the soak")
	}
	s.assertSafe()
}

// soakLength is how long a soak's fault schedule runs: 3 s scaled, or
// -chaos.soak.
func soakLength() time.Duration {
	if *soakFlag > 0 {
		return *soakFlag
	}
	return scaled(3 * time.Second)
}

// faultSchedule injects, for length, a seeded random schedule of the faults
// that must stay safe: pauses, kills with restarts delayed past the TTL,
// black holes, lost replies, latency and resets, on at most two nodes at a
// time so that a load keeps making progress. It heals every node before it
// returns the number of faults injected.
func (s *scenario) faultSchedule(length time.Duration) int {
	type state struct {
		faulty bool
		killed time.Time
		what   string
	}
	nodes := make([]state, len(s.cl.Nodes))
	faulty := func() int {
		n := 0
		for _, st := range nodes {
			if st.faulty {
				n++
			}
		}
		return n
	}
	heal := func(i int) {
		n := s.cl.Nodes[i]
		if !nodes[i].killed.IsZero() {
			// Restart only once a maximum TTL has passed since the crash.
			time.Sleep(time.Until(nodes[i].killed.Add(chaosTTL)))
			s.fault(n.RestartEmpty())
		}
		n.Heal()
		n.Server.Resume()
		s.note("node %d healed (was %s)", i, nodes[i].what)
		nodes[i] = state{}
	}
	faults := 0
	end := time.Now().Add(length)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(s.rng.Int64N(int64(scaled(150 * time.Millisecond))))) // the schedule's pace
		i := s.rng.IntN(len(s.cl.Nodes))
		if nodes[i].faulty {
			heal(i)
			continue
		}
		if faulty() >= 2 {
			continue
		}
		n := s.cl.Nodes[i]
		var what string
		switch s.rng.IntN(6) {
		case 0:
			n.Server.Pause()
			what = "paused"
		case 1:
			n.Server.Kill()
			nodes[i].killed = time.Now()
			what = "killed"
		case 2:
			s.fault(n.BlackHole())
			what = "black-holed"
		case 3:
			s.fault(n.DropReplies())
			what = "dropping replies"
		case 4:
			d := time.Duration(s.rng.Int64N(int64(2 * chaosNodeD)))
			s.fault(n.Latency(d))
			what = fmt.Sprintf("slow by %v", d)
		case 5:
			s.fault(n.ResetConnections())
			what = "resetting connections"
		}
		nodes[i].faulty, nodes[i].what = true, what
		faults++
		s.note("node %d %s", i, what)
	}
	for i := range nodes {
		if nodes[i].faulty {
			heal(i)
		}
	}
	return faults
}
