package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed scripts/handoff.lua
	handoffLua    string
	handoffScript = redis.NewScript(handoffLua)

	//go:embed scripts/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)
)

// node is one independent Redis master.
type node struct {
	index  int
	addr   string // for messages; "node[i]" when the client does not expose one
	client redis.UniversalClient
}

// A notice is a message the scripts publish when they change the key; the
// zero notice publishes nothing.
type notice struct{ channel, message string }

// acquire runs the acquire script: true when the key now holds token. When
// the key is set, the node publishes announce.
func (n *node) acquire(ctx context.Context, key, token string, ttl time.Duration, announce notice) (bool, error) {
	return n.run(ctx, acquireScript, key, token, ttl.Milliseconds(), announce.channel, announce.message)
}

// release deletes the key if it holds token: true when it did. When it
// does, the node publishes announce; receivers is how many subscribers
// heard it.
func (n *node) release(ctx context.Context, key, token string, announce notice) (deleted bool, receivers int64, err error) {
	v, err := releaseScript.Run(ctx, n.client, []string{key}, token, announce.channel, announce.message).Int64()
	if err != nil {
		return false, 0, err
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
func (n *node) handOff(ctx context.Context, key, oldToken, newToken string, ttl time.Duration, announce notice) (state, receivers int64, err error) {
	v, err := handoffScript.Run(ctx, n.client, []string{key}, oldToken, newToken, ttl.Milliseconds(), announce.channel, announce.message).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("redlock: hand-off script returned %v", v)
	}
	return v[0], v[1], nil
}

// extend sets the key's expiry to ttl if it holds token: true when it did.
func (n *node) extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return n.run(ctx, extendScript, key, token, ttl.Milliseconds())
}

func (n *node) run(ctx context.Context, s *redis.Script, key string, args ...any) (bool, error) {
	v, err := s.Run(ctx, n.client, []string{key}, args...).Int64()
	if err != nil {
		return false, err
	}
	return v == 1, nil
}

// newNodes checks the clients given to New and wraps them.
//
// Two entries for one master would count one server's vote twice and break
// the majority arithmetic silently, so duplicates are an error. They are found
// by address where the client exposes one (a *redis.Client), and by identity
// otherwise.
func newNodes(clients []redis.UniversalClient) ([]*node, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalidArgument)
	}
	nodes := make([]*node, len(clients))
	seen := make(map[any]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%w: node %d is nil", ErrInvalidArgument, i)
		}
		addr, identity := nodeIdentity(c)
		if identity != nil {
			if j, dup := seen[identity]; dup {
				return nil, fmt.Errorf("%w: nodes %d and %d are the same server %s", ErrInvalidArgument, j, i, addr)
			}
			seen[identity] = i
		}
		if addr == "" {
			addr = fmt.Sprintf("node[%d]", i)
		}
		nodes[i] = &node{index: i, addr: addr, client: c}
	}
	return nodes, nil
}

// isNil reports whether c is nil or a typed nil pointer, which would panic on
// first use.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// nodeIdentity returns the client's address, if it exposes one, and a
// comparable value that is equal for two clients of the same server (nil when
// there is none: a client type that is not comparable cannot be checked).
func nodeIdentity(c redis.UniversalClient) (addr string, identity any) {
	if rc, ok := c.(*redis.Client); ok {
		o := rc.Options()
		addr = o.Addr
		if o.Network == "unix" {
			return addr, "unix:" + addr
		}
		return addr, "tcp:" + canonicalAddr(addr)
	}
	if reflect.TypeOf(c).Comparable() {
		return "", c
	}
	return "", nil
}

// canonicalAddr folds the common spellings of one loopback address together,
// so that "localhost:6379" and ":6379" are recognised as "127.0.0.1:6379".
// Other names are compared as written: resolving them would need DNS in New.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return strings.ToLower(addr)
	}
	host = strings.ToLower(host)
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
