// Schedule: a seeded random sequence of faults over the nodes, with
// majority episodes.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// A Fault is what a Schedule does to one node.
type Fault int

// The faults a Schedule draws. Each is safe for a Redlock client to meet on
// any number of nodes: a restart without persistence (KilledEmpty) comes
// only a maximum TTL after the crash, when no validity that counted the
// node's keys is left.
const (
	Healthy         Fault = iota
	SlowReplies           // replies delayed, within the node deadline
	LateReplies           // replies delayed past the node deadline
	LostReplies           // commands run, their replies are dropped
	BlackHoled            // requests are dropped
	Resetting             // every connection is reset
	Paused                // SIGSTOP; SIGCONT to heal
	Killed                // kill -9; restarted from its AOF (appendfsync always)
	KilledEmpty           // kill -9; restarted without its data a maximum TTL later
	OutOfMemory           // at maxmemory with noeviction: writes answer OOM
	ChannelsRevoked       // the clients' ACL user lost its channel rights
	numFaults

	// Varied is not drawn: Since reports it for a node whose faults
	// changed since the Health was taken.
	Varied Fault = -1
)

var faultNames = [...]string{"healthy", "slow replies", "late replies", "lost replies", "black-holed",
	"resetting connections", "paused", "killed (AOF)", "killed (restart empty, delayed)", "out of memory",
	"channel rights revoked"}

func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "varied"
}

// Configuration reports whether f leaves the node up and reachable, only
// refusing some commands (OOM, NOPERM): a delete still runs there.
func (f Fault) Configuration() bool { return f == OutOfMemory || f == ChannelsRevoked }

// How often each fault is drawn, for one node and for a majority episode.
// On a majority, the configuration faults and late replies are the
// interesting ones: a client must then fail cleanly (OOM, timeouts) or
// carry on (no channel rights); a majority down only stalls it, and a
// majority restarted empty after a TTL is a new cluster.
var (
	faultWeights = [numFaults]int{
		SlowReplies: 2, LateReplies: 4, LostReplies: 2, BlackHoled: 2, Resetting: 2, Paused: 4,
		Killed: 4, KilledEmpty: 1, OutOfMemory: 4, ChannelsRevoked: 4,
	}
	episodeWeights = [numFaults]int{
		SlowReplies: 1, LateReplies: 3, LostReplies: 1, BlackHoled: 1, Resetting: 1, Paused: 1,
		Killed: 1, OutOfMemory: 4, ChannelsRevoked: 4,
	}
)

// ScheduleOptions configure a Schedule.
type ScheduleOptions struct {
	Seed         uint64        // fixes the schedule: which faults, on which nodes, in which order
	NodeDeadline time.Duration // the clients' per-node deadline: LateReplies exceed it, SlowReplies do not
	MaxTTL       time.Duration // the longest TTL any client asks for: KilledEmpty stays down that long
	User         string        // the ACL user whose channel rights ChannelsRevoked takes
	Pace         time.Duration // steps come after a uniform delay in [0, Pace)
	MaxFaulty    int           // nodes faulty at once outside majority episodes
	// Settle is how long after a restart Since still reports a node as
	// Varied: go-redis fails every command to a node whose dials failed
	// for up to a second after it is back.
	Settle time.Duration
	// Quarantine is how long after a restart without its data (KilledEmpty)
	// Since still reports a node as Varied: the restart guard keeps its
	// votes out that long.
	Quarantine  time.Duration
	EpisodeOdds float64  // the chance, per step, of a majority episode
	History     *History // where faults are noted; may be nil
}

// A Schedule injects a seeded random sequence of faults into a Cluster.
// Each step picks a node: a faulty one is healed (a killed one only once
// its restart is due); a healthy one gets a fault drawn from the weights
// above, unless MaxFaulty nodes are faulty already. Now and then a majority
// episode heals everything, gives one fault to a majority of the nodes for
// a few steps, and heals them. One fault per node at a time.
type Schedule struct {
	c   *Cluster
	opt ScheduleOptions
	rng *rand.Rand // the Run goroutine's

	change sync.Mutex // held while faults are applied or healed

	mu       sync.Mutex
	nodes    []nodeFault
	counts   [numFaults]int
	episodes int
}

type nodeFault struct {
	fault     Fault
	epoch     uint64    // changes whenever the node's fault does
	hard      uint64    // changes whenever a network or process fault starts or ends
	restartAt time.Time // when a killed node may restart
	restarted time.Time // when it last restarted
	reborn    time.Time // when it last restarted without its data
}

// NewSchedule makes a schedule for c; Run starts it.
func (c *Cluster) NewSchedule(opt ScheduleOptions) *Schedule {
	return &Schedule{
		c: c, opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x5851f42d4c957f2d)),
		nodes: make([]nodeFault, len(c.Nodes)),
	}
}

// Run runs the schedule until ctx ends, then heals every node, restarting
// killed ones at once: the caller has stopped its clients by then, so no
// validity depends on a node restarted empty. It returns the first error
// of a fault or a heal.
func (s *Schedule) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return s.healAll(true)
		case <-time.After(s.pace()):
		}
		if err := s.step(ctx); err != nil {
			s.note("schedule stopped: %v", err)
			return errors.Join(err, s.healAll(true))
		}
	}
}

func (s *Schedule) pace() time.Duration { return pace(s.rng, s.opt.Pace) }

func pace(rng *rand.Rand, p time.Duration) time.Duration {
	if p <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(p)))
}

func (s *Schedule) step(ctx context.Context) error {
	if s.rng.Float64() < s.opt.EpisodeOdds {
		return s.episode(ctx)
	}
	s.change.Lock()
	defer s.change.Unlock()
	i := s.rng.IntN(len(s.nodes))
	if f := s.fault(i); f != Healthy {
		if s.restartDue(i) {
			return s.heal(i)
		}
		return nil
	}
	if s.faulty() >= s.opt.MaxFaulty {
		return nil
	}
	return s.apply(i, s.draw(true), s.rng)
}

// Strike gives fault f to a healthy node drawn with rng, now, unless
// MaxFaulty nodes are faulty already or the schedule is busy changing
// faults; a later step heals it. A test calls it from its operations to
// land a fault inside one, such as between an acquisition and its release.
// It reports the node, or -1.
func (s *Schedule) Strike(f Fault, rng *rand.Rand) (int, error) {
	if !s.change.TryLock() {
		return -1, nil
	}
	defer s.change.Unlock()
	if s.faulty() >= s.opt.MaxFaulty {
		return -1, nil
	}
	var healthy []int
	for i := range s.nodes {
		if s.fault(i) == Healthy {
			healthy = append(healthy, i)
		}
	}
	if len(healthy) == 0 {
		return -1, nil
	}
	i := healthy[rng.IntN(len(healthy))]
	return i, s.apply(i, f, rng)
}

// episode gives one fault to a majority of the nodes for a few steps.
func (s *Schedule) episode(ctx context.Context) error {
	if err := s.healAll(false); err != nil {
		return err
	}
	f := s.draw(false)
	n := len(s.nodes)
	var hit []int
	s.change.Lock()
	for _, i := range s.rng.Perm(n)[:n/2+1] {
		if s.fault(i) != Healthy { // a Strike came first
			continue
		}
		if err := s.apply(i, f, s.rng); err != nil {
			s.change.Unlock()
			return err
		}
		hit = append(hit, i)
	}
	s.change.Unlock()
	s.mu.Lock()
	s.episodes++
	s.mu.Unlock()
	s.note("majority episode: %s on nodes %v", f, hit)
	select {
	case <-ctx.Done():
	case <-time.After(s.opt.Pace + s.pace() + s.pace() + s.pace()): // a few steps long
	}
	return s.healAll(false)
}

// draw picks a fault by weight, for one node (single) or a majority.
func (s *Schedule) draw(single bool) Fault {
	weights := &episodeWeights
	if single {
		weights = &faultWeights
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	r := s.rng.IntN(total)
	for f, w := range weights {
		if r < w {
			return Fault(f)
		}
		r -= w
	}
	panic("chaos: draw")
}

func (s *Schedule) fault(i int) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[i].fault
}

func (s *Schedule) faulty() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for _, n := range s.nodes {
		if n.fault != Healthy {
			k++
		}
	}
	return k
}

func (s *Schedule) restartDue(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !time.Now().Before(s.nodes[i].restartAt)
}

// set records node i's new fault.
func (s *Schedule) set(i int, f Fault, restartAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.nodes[i]
	s.nodes[i] = nodeFault{fault: f, epoch: old.epoch + 1, hard: old.hard, restartAt: restartAt, restarted: old.restarted, reborn: old.reborn}
	if (f != Healthy && !f.Configuration()) || (old.fault != Healthy && !old.fault.Configuration()) {
		s.nodes[i].hard++
	}
	if old.fault == Killed || old.fault == KilledEmpty {
		s.nodes[i].restarted = time.Now()
	}
	if old.fault == KilledEmpty {
		s.nodes[i].reborn = time.Now()
	}
	if f != Healthy {
		s.counts[f]++
	}
}

func (s *Schedule) apply(i int, f Fault, rng *rand.Rand) error {
	n := s.c.Nodes[i]
	var err error
	var restartAt time.Time
	what := f.String()
	// Recorded before a fault starts and after it ends, so that a
	// Health taken in between never misses it.
	s.set(i, f, time.Time{})
	switch f {
	case SlowReplies:
		d := time.Duration(rng.Int64N(int64(s.opt.NodeDeadline / 2)))
		err = n.Latency(d)
		what += fmt.Sprintf(" (%v)", d)
	case LateReplies:
		d := s.opt.NodeDeadline + time.Duration(rng.Int64N(int64(s.opt.NodeDeadline)))
		err = n.Latency(d)
		what += fmt.Sprintf(" (%v)", d)
	case LostReplies:
		err = n.DropReplies()
	case BlackHoled:
		err = n.BlackHole()
	case Resetting:
		err = n.ResetConnections()
	case Paused:
		n.Server.Pause()
	case Killed:
		n.Server.Kill()
		restartAt = time.Now().Add(pace(rng, s.opt.Pace))
	case KilledEmpty:
		n.Server.Kill()
		restartAt = time.Now().Add(s.opt.MaxTTL)
	case OutOfMemory:
		err = n.OutOfMemory()
	case ChannelsRevoked:
		err = n.RevokeChannels(s.opt.User)
	}
	if !restartAt.IsZero() {
		s.mu.Lock()
		s.nodes[i].restartAt = restartAt
		s.mu.Unlock()
	}
	s.note("node %d %s", i, what)
	if err != nil {
		return fmt.Errorf("chaos: node %d: %s: %w%s", i, what, err, n.logTail())
	}
	return nil
}

// heal ends node i's fault. A node killed for a restart without its data
// stays down until its restartAt unless now is set.
func (s *Schedule) heal(i int) error {
	n := s.c.Nodes[i]
	f := s.fault(i)
	var err error
	switch f {
	case SlowReplies, LateReplies, LostReplies, BlackHoled, Resetting:
		n.Heal()
	case Paused:
		n.Server.Resume()
	case Killed:
		n.RestartAOF()
	case KilledEmpty:
		if err = n.RestartEmpty(); err == nil {
			err = n.EnableAOF() // persistent again, so that later kills are safe
		}
	case OutOfMemory:
		err = n.RestoreMemory()
	case ChannelsRevoked:
		err = n.GrantChannels(s.opt.User)
	}
	s.set(i, Healthy, time.Time{})
	if f != Healthy {
		s.note("node %d healed (was %s)", i, f)
	}
	if err != nil {
		return fmt.Errorf("chaos: node %d: healing %s: %w%s", i, f, err, n.logTail())
	}
	return nil
}

// healAll heals every node; a KilledEmpty node not yet due is waited for
// unless now is set.
func (s *Schedule) healAll(now bool) error {
	for i := range s.nodes {
		if s.fault(i) == Healthy {
			continue
		}
		if !now {
			s.mu.Lock()
			at := s.nodes[i].restartAt
			s.mu.Unlock()
			time.Sleep(time.Until(at)) // the restart delay itself
		}
		s.change.Lock()
		err := s.heal(i)
		s.change.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}
