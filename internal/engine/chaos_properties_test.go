// The whole-API fault generator's property checks against the masters
// themselves: leases, releases, expiry, liveness; the fences; and its report.

package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/chaos"
	"github.com/redlock-go/redlock/internal/script"
)

// checkLease checks property 2 for l, which no other call is using: a
// majority of the masters keeps l's token at least until l.Until(). A
// master counts against it if its key is gone, holds another token, or
// expires before Until (reply time + PTTL + 1 ms for PTTL's rounding);
// masters that cannot be read (paused, down) count neither way.
func (g *generator) checkLease(l *Lock, when string) {
	for _, key := range l.Keys() { // a multi-key lock: each key
		g.checkLeaseOf(l, key, when)
	}
}

func (g *generator) checkLeaseOf(l *Lock, key, when string) {
	until := l.Until()
	if !time.Now().Before(until) {
		return
	}
	g.leaseChecks.Add(1)
	nodes := g.s.cl.Nodes
	seen := make([]string, len(nodes))
	against := make([]bool, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, genLeaseWait)
			defer cancel()
			v, ttl, at, err := n.Lease(ctx, key)
			switch {
			case err != nil:
				seen[i] = "unread"
			case v != l.Token():
				against[i] = at.Before(until)
				seen[i] = fmt.Sprintf("%.8q", v)
			case ttl == -1: // no expiry at all: property 3's business
				seen[i] = "ours, no expiry"
			default:
				against[i] = at.Add(ttl + time.Millisecond).Before(until)
				seen[i] = fmt.Sprintf("ours until %+v", time.Until(at.Add(ttl)).Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	n := 0
	for _, a := range against {
		if a {
			n++
		}
	}
	if n > len(nodes)-quorum(len(nodes)) {
		g.violation(pUntil, key, "Until %+v of %.8s on %q %s is later than its keys' expiry on %d masters: %v",
			time.Until(until).Round(time.Millisecond), l.Token(), key, when, n, seen)
	}
}

// checkRelease checks property 6 after an Unlock that began at start:
// once every delete it sends has had its node deadline (two rounds: a
// hand-off, then the release), on the masters that stayed up and reachable
// and answered every command that carried the token; for a resumed lock,
// only those that had answered every one sent before the Unlock began by
// then (before, from settledBefore). (Where one went unanswered, a late
// SET may land after its release and stay until its TTL: a documented
// limitation, bounded by property 3. The Client a lock was resumed from
// is another process, whose requests still on their way the new holder
// cannot wait for: seen, its acquisition, re-sent by go-redis after a
// connection reset, landed after the new holder's delete. Nor, for a
// resumed lock, a master that a hand-off to its token was sent to after
// the Unlock began: a holder that missed the served want's withdrawal
// handed the key to it again, and the Client whose want it was leaves it,
// since its token may be a live holder's elsewhere: a documented
// limitation, CHANGELOG "Known open".) A key still there
// is read again a little later, so that a delete merely slow to start is
// not taken for a missing one; a key that expired meanwhile proves nothing.
func (g *generator) checkRelease(key, token string, health chaos.Health, holder string, start time.Time, before []bool) {
	resumed := strings.Contains(holder, ">")
	clean := func() []int {
		var out []int
		for i, up := range g.sched.Reachable(health) {
			if resumed && g.calls.HandedSince(token, i, start) {
				g.s.hist.NoteKey(key, "%s's token %.8s handed again on master %d after its Unlock began: not checked there", holder, token, i)
				continue
			}
			if up && before[i] && g.calls.Settled(token, i) {
				out = append(out, i)
			}
		}
		return out
	}
	kept := func(i int) (bool, time.Duration) {
		ctx, cancel := context.WithTimeout(bg, genLeaseWait)
		defer cancel()
		v, ttl, _, err := g.s.cl.Nodes[i].Lease(ctx, key)
		return err == nil && v == token, ttl
	}
	g.bg.Add(1)
	time.AfterFunc(time.Until(start.Add(2*chaosNodeD+scaled(25*time.Millisecond))), func() {
		defer g.bg.Done()
		g.relChecks.Add(1)
		var suspects []int
		for _, i := range clean() {
			if ok, _ := kept(i); ok {
				suspects = append(suspects, i)
			}
		}
		if len(suspects) == 0 {
			return
		}
		time.Sleep(chaosNodeD) // a delete slow to start
		for _, i := range suspects {
			if !slices.Contains(clean(), i) {
				continue
			}
			if ok, ttl := kept(i); ok {
				g.violation(pRelease, key, "%s's Unlock of %.8s on %q left its key on master %d (up and answering every command since the lock was requested; now %v) for another %v",
					holder, token, key, i, g.sched.Health().Faults()[i], ttl)
			}
		}
	})
}

// settledBefore is checkRelease's before for holder's Unlock of token,
// taken as it begins: per master, whether every command that carried
// token so far has been answered, for a lock resumed from another Client
// (its holder's name has a ">": resume); true everywhere otherwise, since a
// Client releases its own late SETs.
func (g *generator) settledBefore(holder, token string) []bool {
	out := make([]bool, len(g.s.cl.Nodes))
	for i := range out {
		out[i] = !strings.Contains(holder, ">") || g.calls.Settled(token, i)
	}
	return out
}

// prober checks property 7 now and then: while a majority and one more
// of the masters are up, reachable and not out of memory, one of three
// TryLocks of a free key (a fresh one each, so that an attempt's clean-up
// never stands in the next one's way) must succeed, unless a majority of
// the masters did not answer a plain PING sent beside a failed one within
// a node's deadline either (control): then there is no verdict.
func (g *generator) prober(ctx context.Context) {
	rng := rand.New(rand.NewPCG(g.s.seed, 100))
	usable := func(faults []chaos.Fault) int {
		n := 0
		for _, f := range faults {
			if f == chaos.Healthy || f == chaos.ChannelsRevoked {
				n++
			}
		}
		return n
	}
	need := quorum(len(g.s.cl.Nodes)) + 1
	var controls sync.WaitGroup
	defer controls.Wait()
	select { // the run's start: dials, script loads and AOF rewrites
	case <-ctx.Done():
		return
	case <-time.After(scaled(500 * time.Millisecond)):
	}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(rng.Int64N(int64(scaled(200 * time.Millisecond))))):
		}
		health := g.sched.Health()
		if usable(g.sched.Since(health)) < need {
			continue
		}
		var errs []error
		var tries []string // what each failed try and its control saw
		excused := false
		for try := range 3 {
			ctl := g.control(&controls)
			start := time.Now()
			l, err := g.probe.TryLock(bg, fmt.Sprintf("chaos:gen:probe%d.%d", i, try), genMinTTL)
			took := time.Since(start)
			inTime := ctl()
			if err == nil {
				_ = l.Unlock(bg)
				break
			}
			errs = append(errs, err)
			tries = append(tries, fmt.Sprintf("try %d took %v; PINGs answered in time by masters %v", try, took.Round(time.Millisecond), inTime))
			if len(inTime) < quorum(len(g.s.cl.Nodes)) {
				excused = true
			}
		}
		if usable(g.sched.Since(health)) < need { // a fault came meanwhile: no verdict
			continue
		}
		if len(errs) == 3 && excused {
			// No majority answered a plain PING, sent beside the TryLock on
			// the same go-redis clients, within a node's deadline: the
			// masters as this process reaches them (the machine, the pools
			// the generator's Clients share) could not answer, whatever the
			// library did.
			g.tally.Add("probe TryLock", "no verdict (PINGs late)")
			g.s.t.Logf("probe %d: no verdict: %s", i, strings.Join(tries, "; "))
			continue
		}
		g.tally.Add("probe TryLock", map[bool]string{true: "ok", false: "failed"}[len(errs) < 3])
		if len(errs) == 3 {
			g.violation(pProgress, "", "3 TryLocks of free keys failed while the masters were %v (%s): %v", health.Faults(), strings.Join(tries, "; "), errs)
		}
	}
}

// control sends a PING to every master through the probe's go-redis
// clients, beside a probe's TryLock, and returns a func that returns the
// masters that answered within a node's deadline (waiting for the rest
// until that deadline at most): the control that tells a TryLock the
// library failed from one no library could have made (a stalled machine;
// pools held by the other Clients' requests to a master that stopped
// answering a moment ago). The PINGs still out are waited for in wg.
func (g *generator) control(wg *sync.WaitGroup) func() []int {
	clients := g.profiles[0]
	start := time.Now()
	answered := make(chan int, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, chaosNodeD)
			defer cancel()
			if c.Ping(ctx).Err() == nil && time.Since(start) <= chaosNodeD {
				answered <- i
			}
		}()
	}
	return func() []int {
		var out []int
		deadline := time.NewTimer(time.Until(start.Add(chaosNodeD)))
		defer deadline.Stop()
		for len(out) < len(clients) {
			select {
			case i := <-answered:
				out = append(out, i)
			case <-deadline.C:
				slices.Sort(out)
				return out
			}
		}
		slices.Sort(out)
		return out
	}
}

// sampleValues checks property 10 now and then, and once more at the end:
// every lock key on every master that answers holds a lock's token (a
// UUID in canonical form, as Lock.Token gives it) and nothing else: no
// mark, no suffix, no other Client's write. The library's own keys (fence
// counters, wanted keys) are not lock keys.
func (g *generator) sampleValues(ctx context.Context) {
	rng := rand.New(rand.NewPCG(g.s.seed, 101))
	for {
		select {
		case <-ctx.Done():
			g.checkValues()
			return
		case <-time.After(time.Duration(rng.Int64N(int64(scaled(100 * time.Millisecond))))):
		}
		g.checkValues()
	}
}

// checkValues reads every lock key on every master once (a master that
// does not answer within a node's deadline is skipped).
func (g *generator) checkValues() {
	for i, n := range g.s.cl.Nodes {
		ctx, cancel := context.WithTimeout(bg, chaosNodeD)
		values, _ := n.Sample(ctx, "chaos:gen:*") // none from a paused or down master
		cancel()
		for k, v := range values {
			if libraryKey(k) {
				continue
			}
			g.tally.Add("value samples", "read")
			if checkToken(v) != nil {
				g.violation(pValue, k, "master %d: %q holds %q, not a lock's token", i, k, v)
			}
		}
	}
}

// libraryKey reports whether k is one of the library's own keys beside a
// lock key: a fence counter or a wanted key.
func libraryKey(k string) bool {
	return strings.HasSuffix(k, script.FenceSuffix) || strings.HasSuffix(k, script.WantedSuffix)
}

// checkExpiry checks property 3: with every Client closed, no lock key
// lives longer than the largest TTL, and after that long none is left.
// Fence counters (key + fenceSuffix) are no lock keys: they never expire.
func (g *generator) checkExpiry() {
	start := time.Now()
	for i, keys := range g.lockKeyTTLs() {
		for k, ttl := range keys {
			if ttl < 0 || ttl > genMaxTTL {
				g.violation(pExpiry, k, "master %d keeps %q for %v, longer than the largest TTL %v", i, k, ttl, genMaxTTL)
			}
		}
	}
	time.Sleep(time.Until(start.Add(genMaxTTL + scaled(50*time.Millisecond)))) // every TTL runs out
	for i, keys := range g.lockKeyTTLs() {
		for k, ttl := range keys {
			g.violation(pExpiry, k, "master %d still keeps %q (PTTL %v) a largest TTL after the clients closed", i, k, ttl)
		}
	}
}

// lockKeyTTLs is Cluster.KeyTTLs of the generator's keys without their
// fence counters.
func (g *generator) lockKeyTTLs() []map[string]time.Duration {
	all := g.s.cl.KeyTTLs(g.s.t, "chaos:gen:*")
	for _, keys := range all {
		maps.DeleteFunc(keys, func(k string, _ time.Duration) bool { return strings.HasSuffix(k, script.FenceSuffix) })
	}
	return all
}

// checkFences checks property 8 once the holders are done: the fences the
// store recorded (see chaos.FenceStore and the generator's doc comment for
// what a data loss excuses).
func (g *generator) checkFences() {
	vs := g.fences.Check()
	for _, v := range vs {
		g.violationAt(pFence, v.Key, v.At, "%s", v.Msg)
	}
	if len(vs) > 0 {
		g.s.t.Errorf("seed %d: property %s: the store's history:\n%s", g.s.seed, pFence, g.fences.Report(3))
	}
	if st := g.fences.Stats(); st.Successive == 0 {
		g.s.t.Errorf("seed %d: no two successive fences of a key to compare (%v): property %s was not tested", g.s.seed, st, pFence)
	}
}

// report fails the run for every property that failed, with the seed and
// the part of the history that shows it, and for every kind of call that
// never succeeded.
func (g *generator) report() {
	t, seed := g.s.t, g.s.seed
	overlaps := g.s.hist.Overlaps()
	for i, o := range overlaps {
		if i == 3 {
			t.Errorf("… %d overlaps in all", len(overlaps))
			break
		}
		t.Errorf("SAFETY VIOLATION (seed %d), property %s: %v\nhistory of %q around it:\n%s", seed, pOverlap, o, o.Key,
			g.s.hist.Excerpt(o.Key, o.At.Add(-genMaxTTL), o.At.Add(o.By+chaosSlack)))
	}
	if value, completed := g.s.hist.Counter(); value != completed {
		t.Errorf("SAFETY VIOLATION (seed %d): counter %d after %d completed sections", seed, value, completed)
	}
	g.mu.Lock()
	for _, p := range slices.Sorted(maps.Keys(g.counts)) {
		t.Errorf("seed %d: property %s: %d violations; the first:", seed, p, g.counts[p])
		for i, v := range g.violations[p] {
			if i == 0 && v.key != "" {
				t.Errorf("  %s\nhistory of %q before it:\n%s", v.msg, v.key, g.s.hist.Excerpt(v.key, v.at.Add(-genMaxTTL), v.at))
				continue
			}
			t.Errorf("  %s", v.msg)
		}
	}
	g.mu.Unlock()
	success := map[string]string{
		"TryLock": "ok", "Lock": "ok", "Extend": "ok", "Extend (pair)": "ok", "Extend (racing Unlock)": "not held", // Unlock nearly always wins
		"Unlock": "ok", "Unlock (racing Extend)": "ok", fnNil: "ok", fnErr: "fn error", fnPanic: "panicked",
		fnLong: "ok", "Close": "ok", "call after Close": "closed", "probe TryLock": "ok",
		"Fence": "ok", "Fence (again)": "ok", "Fence (after Unlock)": "not held", "Fence (in Do)": "ok",
	}
	for _, kind := range slices.Sorted(maps.Keys(success)) {
		if g.tally.Count(kind, success[kind]) == 0 {
			t.Errorf("seed %d: no %s ever succeeded (%d calls): the run did not test it", seed, kind, g.tally.Calls(kind))
		}
	}
	if g.handOffs.Load() == 0 {
		t.Errorf("seed %d: no hand-off: the run did not test them", seed)
	}
	g.mu.Lock()
	if g.dump != "" {
		t.Logf("%s", g.dump)
	}
	g.mu.Unlock()
	if t.Failed() {
		t.Logf("replay the schedule with REDLOCK_CHAOS_SEED=%d", seed)
	}
}
