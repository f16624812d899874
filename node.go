// One master: the scripts run on it, and whether it takes notices.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one independent Redis master.
type node struct {
	index  int
	addr   string // for messages; "node[i]" when the client does not expose one
	client redis.UniversalClient
	pipe   *pipe                       // nil: batching is off, each request is its own command
	known  atomic.Pointer[knownMemory] // the master's memory as last learned (guard.go)

	// When the master last refused a notice (a Redis 7 ACL user without
	// channel rights), in Unix nanoseconds: notices to it stay off for
	// noticeRetry after that, so the refusal costs one script per master,
	// not one per call, and rights granted later are found again.
	noticesRefused atomic.Int64
}

// noticeRetry is how long a master that refused a notice is sent none.
const noticeRetry = time.Minute

// notice returns announce, or no notice while n refuses them.
func (n *node) notice(announce notice) notice {
	if n.refusesNotices() {
		return notice{}
	}
	return announce
}

// refusesNotices reports whether n refused a notice less than noticeRetry
// ago.
func (n *node) refusesNotices() bool {
	at := n.noticesRefused.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < noticeRetry
}

// refusedNotice records that n refused a notice.
func (n *node) refusedNotice() { n.noticesRefused.Store(time.Now().UnixNano()) }

// acquire runs the acquire script: true when the key now holds token. When
// the key is set, the node publishes announce.
func (n *node) acquire(ctx context.Context, send func() bool, key, token string, ttl time.Duration, announce notice, guard bool) (ballot, error) {
	announce = n.notice(announce)
	k := n.known.Load()
	v, err := n.eval(ctx, acquireScript, send, []string{key}, token, ttl.Milliseconds(), announce.channel, announce.message, boolArg(guard), n.marker(key), k.arg()).Int64Slice()
	if err != nil {
		return ballot{}, err
	}
	if len(v) != 4 {
		return ballot{}, fmt.Errorf("redlock: acquire script returned %v", v)
	}
	if v[0] == 3 {
		n.refusedNotice()
	}
	return ballot{yes: v[0] == 1 || v[0] == 3, mem: n.memory(k, v[1], v[2], v[3])}, nil
}

// eval runs script s on the master, through its pipe when batching is on.
// send, when not nil, is asked just before the request goes out; when it
// says no, nothing is sent and the error is errNotSent.
func (n *node) eval(ctx context.Context, s *redis.Script, send func() bool, keys []string, args ...any) *redis.Cmd {
	if n.pipe != nil {
		return n.pipe.do(ctx, s, send, keys, args)
	}
	if send != nil && !send() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errNotSent)
		return cmd
	}
	return s.Run(ctx, n.client, keys, args...)
}

// marker is the master's memory marker for a voting script about key
// (guard.go).
func (n *node) marker(key string) string { return markerKey(key, n.isCluster()) }

// boolArg is a script's boolean argument.
func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// release deletes the key if it holds token: true when it did. When it
// does, the node publishes announce; receivers is how many subscribers
// heard it.
func (n *node) release(ctx context.Context, key, token string, announce notice) (deleted bool, receivers int64, err error) {
	announce = n.notice(announce)
	v, err := n.eval(ctx, releaseScript, nil, []string{key}, token, announce.channel, announce.message).Int64()
	if err != nil {
		return false, 0, err
	}
	if v < 0 {
		n.refusedNotice()
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

// handOff sets the key to newToken for ttl if it holds oldToken or is free,
// publishing announce; it returns the script's state and how many
// subscribers heard the notice.
func (n *node) handOff(ctx context.Context, send func() bool, key, oldToken, newToken string, ttl time.Duration, announce notice, guard bool) (state, receivers int64, mem memory, err error) {
	announce = n.notice(announce)
	k := n.known.Load()
	v, err := n.eval(ctx, handoffScript, send, []string{key}, oldToken, newToken, ttl.Milliseconds(), announce.channel, announce.message, boolArg(guard), n.marker(key), k.arg()).Int64Slice()
	if err != nil {
		return 0, 0, memory{}, err
	}
	if len(v) != 5 {
		return 0, 0, memory{}, fmt.Errorf("redlock: hand-off script returned %v", v)
	}
	mem = n.memory(k, v[2], v[3], v[4])
	if v[1] < 0 {
		n.refusedNotice()
		return v[0], 0, mem, nil
	}
	return v[0], v[1], mem, nil
}

// extend makes the key live at least ttl more if it holds token, never
// shortening it; with guard, it also puts back our token where the key is
// absent because the master's memory is no longer born, the one that held
// our key (repair; 0: unknown, no repair). Yes when the key holds our
// token now.
func (n *node) extend(ctx context.Context, key, token string, ttl time.Duration, guard bool, born int64) (ballot, error) {
	k := n.known.Load()
	v, err := n.eval(ctx, extendScript, nil, []string{key}, token, ttl.Milliseconds(), boolArg(guard), n.marker(key), born, k.arg()).Int64Slice()
	if err != nil {
		return ballot{}, err
	}
	if len(v) != 4 {
		return ballot{}, fmt.Errorf("redlock: extend script returned %v", v)
	}
	return ballot{yes: v[0] > 0, mem: n.memory(k, v[1], v[2], v[3])}, nil
}

// fence runs the fence script on key's counter if key holds token: with
// raise 0 it increments the counter, otherwise it raises it to at least
// raise. It returns the counter's value, or 0 when key does not hold token;
// a counter that is not a positive integer (someone else wrote it) is an
// error.
func (n *node) fence(ctx context.Context, key, token string, raise uint64) (uint64, error) {
	arg := ""
	if raise > 0 {
		arg = strconv.FormatUint(raise, 10)
	}
	s, err := n.eval(ctx, fenceScript, nil, []string{key, fenceKey(key, n.isCluster())}, token, arg).Text()
	if errors.Is(err, redis.Nil) {
		return 0, nil // not held
	}
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("redlock: fence counter of %q is %q, not a positive integer", key, s)
	}
	return v, nil
}

// isCluster reports whether the node is a Redis Cluster, whose scripts may
// only touch keys of one hash slot.
func (n *node) isCluster() bool {
	_, ok := n.client.(*redis.ClusterClient)
	return ok
}
