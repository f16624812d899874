package redlock

import (
	"context"
	_ "embed"
	"fmt"
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
