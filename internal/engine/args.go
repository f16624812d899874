// A round's arguments, and the script commands built from them for one
// master: the declared keys, the notice, the marker.

package engine

import (
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/script"
)

// A roundArgs holds the script arguments that every master of a round
// shares, boxed once for the round: go-redis takes arguments as values of
// type any, and boxing a string or a large number for each master's call
// is an allocation each.
type roundArgs struct {
	key              string // the first key of a multi-key lock (the marker's slot)
	keyArg, token    any
	keys             []any // a multi-key lock's keys; nil for one key (multi.go)
	ttl              any   // in milliseconds
	channel, message any   // the notice
	guard            any   // "1" when the restart guard is on
	newToken         any   // the hand-off's
	trusted          any   // the hand-off's: "1" when a key that holds token needs no memory report (lua/handoff.lua)
	remote           any   // the hand-off's: "1" when newToken is another Client's waiter's (wants.go)
	quiet            any   // the release's: "1" when the notice goes out only where the key is marked (Lock.quiet)

	plainOnce sync.Once
	plainKeys []any // declaredKeys(false), made once

	releaseOnce sync.Once
	release     []any // the release script's command on a plain master whose notice is the round's (node.go's releaseCmd), made once; set quiet before

	quickOnce sync.Once
	quick     [2][2][]any // quickSet's commands, made once: [0] alone, [1] with the marker's GET
}

// quickSet is the quick acquisition's commands (quick.go's quickCmds): SET
// key token NX PX ttl, then marker when not nil (the same for every master
// of the round), made once for the round.
func (a *roundArgs) quickSet(marker []any) *[2][]any {
	a.quickOnce.Do(func() {
		set := []any{"set", a.keyArg, a.token, "nx", "px", a.ttl}
		a.quick = [2][2][]any{{set, nil}, {set, getPlainMarker}}
	})
	if marker == nil {
		return &a.quick[0]
	}
	return &a.quick[1]
}

func newRoundArgs(key, token string, ttl time.Duration, announce script.Notice, guard bool) *roundArgs {
	return &roundArgs{
		key: key, keyArg: key, token: token, ttl: ttl.Milliseconds(),
		channel: announce.Channel, message: announce.Message, guard: boolArg(guard),
		trusted: "0", remote: "0", quiet: "0",
	}
}

// declaredKeys returns the lock keys of a (one, or a multi-key lock's),
// then each one's wanted key, as a script declares them, on a Redis Cluster
// master or on a plain one.
func (a *roundArgs) declaredKeys(cluster bool) []any {
	keys := a.keys
	if keys == nil {
		keys = []any{a.keyArg}
	}
	out := make([]any, 0, 2*len(keys))
	out = append(out, keys...)
	for _, k := range keys {
		out = append(out, script.WantedKey(k.(string), cluster))
	}
	return out
}

// scriptCmd returns the command (evalsha's arguments) that runs s on n
// about a's key or keys, with argv: the script's declared keys are the lock
// keys and their wanted keys, then, when voting and the restart guard is
// on, the master's memory marker. Every key a script touches is declared
// (internal/script/lua/*.lua): Cluster routing, ACL key checks and servers that enforce the
// scripting contract depend on it.
func (n *node) scriptCmd(s *script.Script, a *roundArgs, voting bool, argv ...any) []any {
	var keys []any
	if n.isCluster() {
		keys = a.declaredKeys(true)
	} else {
		a.plainOnce.Do(func() { a.plainKeys = a.declaredKeys(false) })
		keys = a.plainKeys
	}
	marker := voting && a.guard == "1"
	nkeys := len(keys)
	if marker {
		nkeys++
	}
	args := make([]any, 3, 3+nkeys+len(argv))
	args[0], args[1], args[2] = "evalsha", s.SHA, nkeys
	args = append(args, keys...)
	if marker {
		args = append(args, n.markerArg(a.key))
	}
	return append(args, argv...)
}

// noticeArgs returns a's notice, or none while n refuses notices; on a
// Redis Cluster master, on the key's shard channel.
func (n *node) noticeArgs(a *roundArgs) (channel, message any) {
	if n.refusesNotices() {
		return "", ""
	}
	if ch, ok := a.channel.(string); ok && ch != "" && n.isCluster() {
		return n.channelOf(a.key, ch), a.message
	}
	return a.channel, a.message
}

// channelOf is the channel on n for a notice on key's plain channel ch: ch
// itself, or on a Redis Cluster master a shard channel in key's slot.
func (n *node) channelOf(key, ch string) string { return script.ChannelOn(key, ch, n.isCluster()) }

// plainMarker is markerKey's answer for a plain master, boxed once.
var plainMarker any = script.MarkerKey("", false)

// markerArg is the master's memory marker for a voting script about key
// (guard.go), as a script argument.
func (n *node) markerArg(key string) any {
	if !n.isCluster() {
		return plainMarker
	}
	return script.MarkerKey(key, true)
}

// boolArg is a script's boolean argument.
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
