// The quick acquisition: plain commands standing in for the acquire
// script under load.

package engine

import (
	"strconv"
	"strings"

	"github.com/redlock-go/redlock/driver"
)

// The quick acquisition: where the acquire script would only set a free
// key and find the master's memory as the Client knows it, plain commands
// do the same for a fraction of the master's CPU (a script call costs
// about a microsecond more than a command, and each redis.call in it
// about as much again: docs/performance.md). On a Single or Failover
// master, for one key, with no acquired notice to publish, and with the
// restart guard off or the master's memory known (knownMemory), the
// script's request may go as SET key token NX PX ttl, then, with the guard
// on, GET of the marker, later in the same pipeline on one connection, so
// that the master runs the GET after the SET (driver.Conn's DoMulti). The
// pipe sends them so when the request shares a batch (master.Pipe's
// StartQuick), with one GET of the marker after all of the batch's SETs.
// Their replies decide the call only when:
//
//   - Q1 the SET set the key (a free key, now ours for ttl), and
//   - Q2 the marker read after it names the memory the Client knows (its
//     born) with a longest TTL no shorter than ttl.
//
// Q2 makes the vote as good as the script's: a master's memory is lost
// only with its marker, and a new marker is born later, so a marker that
// still names the known memory after the SET (read later on the same
// connection) means the SET landed in it,
// and the script would not have lengthened the marker's longest TTL. In
// every other case (the key was there, ours after a re-send or another's;
// no marker, or another memory, or a longer TTL) the acquire script is
// sent next, and its answer ends the call, as if it had been sent alone: it
// is written to run after our own SET (lua/acquire.lua: a key that holds
// our token is ours), marks a refusal in the wanted key, and reads or
// makes the marker. An error of either command (the master failed, the
// reply was lost) is the call's error: a failed call, which may have set
// the key, as a script's lost reply may have.
func (n *node) quickCmds(a *roundArgs, k *knownMemory) *[2][]any {
	if a.keys != nil || (n.topo.Kind != driver.Single && n.topo.Kind != driver.Failover) {
		return nil
	}
	if ch, _ := n.noticeArgs(a); ch != nil && ch != "" {
		return nil
	}
	if a.guard != "1" {
		return a.quickSet(nil)
	}
	if k == nil {
		return nil
	}
	return a.quickSet(getPlainMarker)
}

// getPlainMarker is the GET of a plain master's memory marker.
var getPlainMarker = []any{"get", plainMarker}

// acquireAnswer reads the reply to an acquire request that quickCmds'
// commands may have stood in for: decided false when they went and Q1 or
// Q2 does not hold, and the acquire script must answer.
func (n *node) acquireAnswer(cmd driver.Reply, k *knownMemory, a *roundArgs) (b ballot, err error, decided bool) {
	v, quick := cmd.Val.([2]any)
	if !quick || cmd.Err != nil {
		b, err := n.acquireReply(cmd, k)
		return b, err, true
	}
	if v[0] != "OK" {
		return ballot{}, nil, false
	}
	if a.guard != "1" {
		return ballot{yes: true, mem: n.memory(nil, -1, 0, 0)}, nil, true
	}
	marker, _ := v[1].(string)
	born, longest, ok := parseMarker(marker)
	if !ok || k == nil || born != k.born || longest < a.ttl.(int64) {
		return ballot{}, nil, false
	}
	return ballot{yes: true, mem: n.memory(k, -2, longest, born)}, nil, true
}

// parseMarker reads a memory marker's value, "<born> <longest>"
// (lua/memory.lua).
func parseMarker(v string) (born, longest int64, ok bool) {
	b, l, found := strings.Cut(v, " ")
	if !found || !digits(b) || !digits(l) {
		return 0, 0, false // as memory.lua's '^(%d+) (%d+)$' reads it: not a memory
	}
	born, err1 := strconv.ParseInt(b, 10, 64)
	longest, err2 := strconv.ParseInt(l, 10, 64)
	return born, longest, err1 == nil && err2 == nil
}

// digits reports whether s is one or more decimal digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
