// Package script holds all that a master sees of the library: the Lua
// scripts every step runs there, one file each in lua/, each atomic on its
// master (pitfalls 1 and 6); the names of the library's keys beside a lock
// key (keys.go) and Redis Cluster's hash slots, in which a script's keys
// must all lie; and the notices the scripts and waiters publish
// (notice.go). It decides nothing: the protocol is internal/core's, and
// the I/O the root package's.
package script

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// tokenLua defines ours(), which every script compares a key's value
	// with a token by, the wanted keys' fingerprint(), named(), wanted()
	// and mark(), and publish().
	//go:embed lua/token.lua
	tokenLua string

	// memoryLua defines memory(), for the scripts that vote: see the
	// restart guard (guard.go).
	//go:embed lua/memory.lua
	memoryLua string

	//go:embed lua/acquire.lua
	acquireLua string
	// Acquire takes the key for a token, or names its holder.
	Acquire = withHelpers(acquireLua)

	//go:embed lua/release.lua
	releaseLua string
	// Release deletes the key where it holds the token.
	Release = withHelpers(releaseLua)

	//go:embed lua/handoff.lua
	handoffLua string
	// HandOff replaces our token with the next holder's.
	HandOff = withHelpers(handoffLua)

	//go:embed lua/extend.lua
	extendLua string
	// Extend sets the key's TTL where it holds the token, or repairs it.
	Extend = withHelpers(extendLua)

	//go:embed lua/fence.lua
	fenceLua string
	// Fence draws the key's next fencing token.
	Fence = withHelpers(fenceLua)

	//go:embed lua/acquire_multi.lua
	acquireMultiLua string
	// AcquireMulti takes every key of a multi-key lock, or none.
	AcquireMulti = withHelpers(acquireMultiLua)

	//go:embed lua/extend_multi.lua
	extendMultiLua string
	// ExtendMulti extends every key of a multi-key lock, or none.
	ExtendMulti = withHelpers(extendMultiLua)

	//go:embed lua/release_multi.lua
	releaseMultiLua string
	// ReleaseMulti releases every key of a multi-key lock that holds the token.
	ReleaseMulti = withHelpers(releaseMultiLua)

	//go:embed lua/fence_multi.lua
	fenceMultiLua string
	// FenceMulti draws a multi-key lock's next fencing token.
	FenceMulti = withHelpers(fenceMultiLua)

	//go:embed lua/guard_check.lua
	guardCheckLua string
	// GuardCheck runs memory() alone, as New's check of the Client's
	// rights to the marker (the engine's guard.go).
	GuardCheck = withHelpers(guardCheckLua)

	//go:embed lua/inspect.lua
	inspectLua string
	// Inspect reads a key's value and TTL.
	Inspect = withHelpers(inspectLua)
)

// A Script is one of the scripts, with its SHA1 and its source boxed
// once: the commands that run it are built by the library (see evalsha),
// and boxing a string for every call is an allocation each time.
type Script struct {
	*redis.Script
	SHA, Source any
}

// BySHA finds a script's source from its SHA1, for EVAL after a
// master answered NOSCRIPT (restarted, or its script cache flushed).
var BySHA = map[string]*Script{}

func newLuaScript(src string) *Script {
	s := &Script{Script: redis.NewScript(src), Source: src}
	s.SHA = s.Hash()
	BySHA[s.Hash()] = s
	return s
}

// Evalsha returns the command's arguments that run s on keys with argv:
// EVALSHA sha numkeys keys... argv..., what go-redis's Script.Run sends.
// keys and argv come boxed: the caller boxes what every master of a round
// shares once for all of them.
func (s *Script) Evalsha(nkeys int, keysAndArgv ...any) []any {
	args := make([]any, 3, 3+len(keysAndArgv))
	args[0], args[1], args[2] = "evalsha", s.SHA, nkeys
	return append(args, keysAndArgv...)
}

// AsEval returns the arguments of EVALSHA command args as EVAL with the
// script's source, or nil when args are not a call of one of our scripts.
func AsEval(args []any) []any {
	if len(args) < 3 || args[0] != "evalsha" {
		return nil
	}
	sha, _ := args[1].(string)
	s := BySHA[sha]
	if s == nil {
		return nil
	}
	eval := make([]any, len(args))
	copy(eval, args)
	eval[0], eval[1] = "eval", s.Source
	return eval
}
