// One master: the scripts run on it, and whether it takes notices.

package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/script"
)

// node is one independent Redis master.
type node struct {
	index  int
	addr   string                      // for messages; "node[i]" when the driver does not say
	topo   driver.Topology             // what stands behind it, for New's checks (identity.go)
	conn   master.Conn                 // what the lock logic uses
	inSlot bool                        // a Redis Cluster: scripts on it touch one hash slot
	pipe   *master.Pipe                // nil: batching is off, each request is its own command
	known  atomic.Pointer[knownMemory] // the master's memory as last learned (guard.go)

	// When the master last refused a notice (a Redis 7 ACL user without
	// channel rights), in Unix nanoseconds: notices to it stay off for
	// noticeRetry after that, so the refusal costs one script per master,
	// not one per call, and rights granted later are found again.
	noticesRefused atomic.Int64

	seed      uint64       // core.KeyHash of addr: its rank among the masters for a key (core.Reserves)
	slowUntil atomic.Int64 // Unix ns: asked after the others until then (quorumfirst.go)

	obs    *Observer  // the Client's observers; nil: none
	health nodeHealth // for the observers' NodeState and Quarantine
}

// noticeRetry is how long a master that refused a notice is sent none.
const noticeRetry = time.Minute

// refusesNotices reports whether n refused a notice less than noticeRetry
// ago.
func (n *node) refusesNotices() bool {
	at := n.noticesRefused.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < noticeRetry
}

// refusedNotice records that n refused a notice.
func (n *node) refusedNotice() { n.noticesRefused.Store(time.Now().UnixNano()) }

// acquire runs the acquire script for a.key, a.token and a.ttl: true when
// the key now holds the token. When the key is set, the node publishes
// a's notice. quick says whether the request may go as the quick
// acquisition (quickCmds): not Extend's, which asks a master to take a key
// that may hold our token already.
func (n *node) acquire(ctx context.Context, send master.SendCheck, a *roundArgs, quick bool) (ballot, error) {
	k := n.known.Load()
	cmd := n.acquireCmd(a, k)
	if n.pipe == nil || !quick {
		return n.acquireReply(n.eval(ctx, send, master.LateSend{}, cmd), k)
	}
	b, err, decided := n.acquireAnswer(n.pipe.DoQuick(ctx, send, master.LateSend{}, cmd, n.quickCmds(a, k)), k, a)
	if decided {
		return b, err
	}
	// The quick SET went out: the script's answer ends this call, sent
	// whatever the round decides meanwhile.
	return n.acquireReply(n.eval(ctx, nil, master.LateSend{}, cmd), k)
}

// acquireCmd is the acquire script's command for a, telling the master
// that the Client knows its memory k.
func (n *node) acquireCmd(a *roundArgs, k *knownMemory) []any {
	ch, msg := n.noticeArgs(a)
	if a.keys != nil {
		return n.scriptCmd(script.AcquireMulti, a, true, a.token, a.ttl, a.guard, k.arg())
	}
	return n.scriptCmd(script.Acquire, a, true, a.token, a.ttl, ch, msg, a.guard, k.arg())
}

// acquireReply reads the acquire script's reply to a request that told the
// master k.
func (n *node) acquireReply(cmd driver.Reply, k *knownMemory) (ballot, error) {
	vote, mem, holder, err := n.replyBallot(cmd, k, "acquire")
	if err != nil {
		return ballot{}, err
	}
	if vote == 3 {
		n.refusedNoticeBy(nil)
	}
	return ballot{yes: vote == 1 || vote == 3, mem: mem, holder: holder}, nil
}

// eval runs a script command (evalsha's arguments) on the master, through
// its pipe when batching is on. send, when not nil, is asked just before
// the request goes out; when it says no, nothing is sent and the error is
// errNotSent. keep, when not zero, is a release's (Client.keep): the
// request is sent even once ctx's deadline passed, until keep.until.
func (n *node) eval(ctx context.Context, send master.SendCheck, keep master.LateSend, args []any) driver.Reply {
	if n.pipe != nil {
		return n.pipe.Do(ctx, send, keep, args)
	}
	if send != nil && !send.Send() {
		return driver.Reply{Err: master.ErrNotSent}
	}
	if !keep.Until.IsZero() && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if now := time.Now(); now.Before(keep.Until) {
			var cancel context.CancelFunc // a release kept past its deadline: a deadline of its own
			ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), now.Add(keep.Wait))
			defer cancel()
		}
	}
	return n.conn.Script(ctx, args)
}

// replyBallot reads a voting script's reply (lua/memory.lua's ballot): the
// array {vote, age, longest, born}, with the holder's fingerprint after
// them for an acquire script's refusal (0 when absent), or, for the memory
// k that the request told the script the Client knows, the integer vote +
// 4·longest.
func (n *node) replyBallot(cmd driver.Reply, k *knownMemory, script string) (vote int64, mem memory, holder int64, err error) {
	if err := cmd.Err; err != nil {
		return 0, memory{}, 0, err
	}
	if x, ok := cmd.Val.(int64); ok {
		if k == nil || x < 0 {
			return 0, memory{}, 0, fmt.Errorf("redlock: %s script returned %d, a known memory's reply, to a request that knew none", script, x)
		}
		return x & 3, n.memory(k, -2, x>>2, k.born), 0, nil
	}
	var v [5]int64
	vals := v[:4]
	if s, ok := cmd.Val.([]any); ok && len(s) == 5 { // a refusal names the holder (acquire.lua)
		vals = v[:]
	}
	if err := replyInts(cmd, vals, script); err != nil {
		return 0, memory{}, 0, err
	}
	return v[0], n.memory(k, v[1], v[2], v[3]), v[4], nil
}

// replyInts reads a script's reply, an array of len(v) integers, into v.
func replyInts(cmd driver.Reply, v []int64, script string) error {
	vals, err := cmd.Slice()
	if err != nil {
		return err
	}
	if len(vals) != len(v) {
		return fmt.Errorf("redlock: %s script returned %v", script, vals)
	}
	for i, x := range vals {
		n, ok := x.(int64)
		if !ok {
			return fmt.Errorf("redlock: %s script returned %v", script, vals)
		}
		v[i] = n
	}
	return nil
}

// release deletes a.key if it holds a.token: true when it did. When it
// does, the node publishes a's notice; receivers is how many subscribers
// heard it. keep lets the delete go out past ctx's deadline (Client.keep).
func (n *node) release(ctx context.Context, keep master.LateSend, a *roundArgs) (deleted bool, receivers int64, err error) {
	return n.releaseReply(n.eval(ctx, nil, keep, n.releaseCmd(a)))
}

// releaseCmd is the release script's command for a.
func (n *node) releaseCmd(a *roundArgs) []any {
	ch, msg := n.noticeArgs(a)
	if a.keys != nil {
		// The message, or none, then each key's channel, then quiet.
		if ch == "" {
			msg = ""
		}
		argv := make([]any, 0, 3+len(a.keys))
		argv = append(argv, a.token, msg)
		for _, k := range a.keys {
			argv = append(argv, script.NoticeChannelOn(k.(string), n.isCluster()))
		}
		argv = append(argv, a.quiet)
		return n.scriptCmd(script.ReleaseMulti, a, false, argv...)
	}
	if !n.isCluster() && ch == a.channel && msg == a.message {
		// The same command for every plain master of the round: built once.
		a.releaseOnce.Do(func() { a.release = n.scriptCmd(script.Release, a, false, a.token, ch, msg, a.quiet) })
		return a.release
	}
	return n.scriptCmd(script.Release, a, false, a.token, ch, msg, a.quiet)
}

// releaseReply reads the release script's reply.
func (n *node) releaseReply(cmd driver.Reply) (deleted bool, receivers int64, err error) {
	v, err := cmd.Int64()
	if err != nil {
		return false, 0, err
	}
	if v < 0 {
		n.refusedNoticeBy(nil)
		return true, 0, nil
	}
	return v > 0, max(v-1, 0), nil
}

// Results of the hand-off script.
const (
	handOffRefused  = 0 // another token holds the key
	handOffTaken    = 1 // the key was free, and is now the new token's
	handOffReplaced = 2 // the old token's key is now the new token's
)

// handOff sets a.key to a.newToken for a.ttl if it holds a.token or is
// free, publishing a's notice; it returns the script's state and how many
// subscribers heard the notice.
func (n *node) handOff(ctx context.Context, send master.SendCheck, a *roundArgs) (state, receivers int64, mem memory, err error) {
	k := n.known.Load()
	ch, msg := n.noticeArgs(a)
	var v [5]int64
	err = replyInts(n.eval(ctx, send, master.LateSend{}, n.scriptCmd(script.HandOff, a, true, a.token, a.newToken, a.ttl, ch, msg, a.guard, k.arg(), a.trusted, a.remote)), v[:], "hand-off")
	if err != nil {
		return 0, 0, memory{}, err
	}
	mem = n.memory(k, v[2], v[3], v[4])
	switch {
	case v[1] < 0:
		n.refusedNoticeBy(nil)
		return v[0], 0, mem, nil
	case v[1] > 0:
		return v[0], v[1] - 1, mem, nil
	}
	return v[0], 0, mem, nil
}

// extend makes a.key live at least a.ttl more if it holds a.token, never
// shortening it; with a.guard, it also puts back our token where the key
// is absent because the master's memory is no longer born, the one that
// held our key (repair; 0: unknown, no repair). Yes when the key holds our
// token now.
func (n *node) extend(ctx context.Context, a *roundArgs, born int64) (ballot, error) {
	k := n.known.Load()
	var cmd []any
	if a.keys != nil { // no repair: born does not apply
		cmd = n.scriptCmd(script.ExtendMulti, a, true, a.token, a.ttl, a.guard, k.arg())
	} else {
		cmd = n.scriptCmd(script.Extend, a, true, a.token, a.ttl, a.guard, born, k.arg())
	}
	vote, mem, _, err := n.replyBallot(n.eval(ctx, nil, master.LateSend{}, cmd), k, "extend")
	if err != nil {
		return ballot{}, err
	}
	return ballot{yes: vote > 0, mem: mem}, nil
}

// fence runs the fence script on the counter of keys[0] (or, for a
// multi-key lock, fence_multi.lua on every key's) if the keys hold token: with
// raise 0 it increments the counter, otherwise it raises it to at least
// raise. It returns the counter's value, or 0 when key does not hold token;
// a counter that is not a positive integer (someone else wrote it) is an
// error.
func (n *node) fence(ctx context.Context, keys []string, token string, raise uint64) (uint64, error) {
	arg := ""
	if raise > 0 {
		arg = strconv.FormatUint(raise, 10)
	}
	key := keys[0]
	cmd := script.Fence.Evalsha(2, key, script.FenceKey(key, n.isCluster()), token, arg)
	if len(keys) > 1 { // a multi-key lock: its keys, then their counters
		args := make([]any, 0, 2*len(keys)+2)
		for _, k := range keys {
			args = append(args, k)
		}
		for _, k := range keys {
			args = append(args, script.FenceKey(k, n.isCluster()))
		}
		cmd = script.FenceMulti.Evalsha(2*len(keys), append(args, token, arg)...)
	}
	s, err := n.eval(ctx, nil, master.LateSend{}, cmd).Text()
	if errors.Is(err, driver.ErrNil) {
		return 0, nil // not held
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		// Not naming the key: a master's error is logged as it is, and keys
		// appear in logs only where the user opted in (WithKeyAttributes).
		if len(s) > 24 {
			s = s[:24] + "…"
		}
		return 0, fmt.Errorf("redlock: the lock's fence counter is %q, not a positive integer", s)
	}
	return v, nil
}

// isCluster reports whether the node is a Redis Cluster, whose scripts may
// only touch keys of one hash slot.
func (n *node) isCluster() bool { return n.inSlot }

// keep is the lateSend of a release of a lock of ttl: a delete sent late
// still deletes our token alone, and is worth sending until the key would
// expire anyway (ttl from now bounds that: every request that set it ran
// before now), with a node deadline of its own once it goes. Dropped at its
// node deadline, behind stalled batches or a slow sender, it would leave
// the key on that master for its whole TTL.
func (c *Client) keep(ttl time.Duration) master.LateSend {
	return master.LateSend{Until: time.Now().Add(ttl), Wait: c.nodeTimeout(ttl)}
}
