// The Lua scripts every step runs on a master, one file each in lua/: each
// step is atomic on its master (pitfalls 1 and 6).

package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// tokenLua defines ours(), which every script compares a key's value
	// with a token by, and the wanted keys' fingerprint(), wanted() and
	// mark().
	//go:embed lua/token.lua
	tokenLua string

	// memoryLua defines memory(), for the scripts that vote: see the
	// restart guard (guard.go).
	//go:embed lua/memory.lua
	memoryLua string

	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = newLuaScript(tokenLua + memoryLua + acquireLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = newLuaScript(tokenLua + releaseLua)

	//go:embed lua/handoff.lua
	handoffLua    string
	handoffScript = newLuaScript(tokenLua + memoryLua + handoffLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = newLuaScript(tokenLua + memoryLua + extendLua)

	//go:embed lua/fence.lua
	fenceLua    string
	fenceScript = newLuaScript(tokenLua + fenceLua)

	//go:embed lua/acquire_multi.lua
	acquireMultiLua    string
	acquireMultiScript = newLuaScript(tokenLua + memoryLua + acquireMultiLua)

	//go:embed lua/extend_multi.lua
	extendMultiLua    string
	extendMultiScript = newLuaScript(tokenLua + memoryLua + extendMultiLua)

	//go:embed lua/release_multi.lua
	releaseMultiLua    string
	releaseMultiScript = newLuaScript(tokenLua + releaseMultiLua)

	//go:embed lua/fence_multi.lua
	fenceMultiLua    string
	fenceMultiScript = newLuaScript(tokenLua + fenceMultiLua)

	// guardCheckScript runs memory() alone, as New's check of the
	// Client's rights to the marker (guard.go).
	//go:embed lua/guard_check.lua
	guardCheckLua    string
	guardCheckScript = newLuaScript(memoryLua + guardCheckLua)

	//go:embed lua/inspect.lua
	inspectLua    string
	inspectScript = newLuaScript(inspectLua)
)

// wantedSuffix ends a lock key's wanted key (lua/token.lua): where a waiter
// of another Client records that the key's value refused it, so that the
// holder announces its next hand-off. The lock key itself is never marked.
const wantedSuffix = ":redlock-wanted"

// wantedKey is the wanted key of lock key key on a master: key +
// wantedSuffix, on a Redis Cluster master in key's hash slot (inSlotOf),
// as a script's declared keys must be.
func wantedKey(key string, cluster bool) string {
	if !cluster {
		return key + wantedSuffix
	}
	return inSlotOf(key, wantedSuffix)
}

// A luaScript is one of the scripts, with its SHA1 and its source boxed
// once: the commands that run it are built by the library (see evalsha),
// and boxing a string for every call is an allocation each time.
type luaScript struct {
	*redis.Script
	sha, src any
}

// scriptsBySHA finds a script's source from its SHA1, for EVAL after a
// master answered NOSCRIPT (restarted, or its script cache flushed).
var scriptsBySHA = map[string]*luaScript{}

func newLuaScript(src string) *luaScript {
	s := &luaScript{Script: redis.NewScript(src), src: src}
	s.sha = s.Hash()
	scriptsBySHA[s.Hash()] = s
	return s
}

// evalsha returns the command's arguments that run s on keys with argv:
// EVALSHA sha numkeys keys... argv..., what go-redis's Script.Run sends.
// keys and argv come boxed: the caller boxes what every master of a round
// shares once for all of them.
func (s *luaScript) evalsha(nkeys int, keysAndArgv ...any) []any {
	args := make([]any, 3, 3+len(keysAndArgv))
	args[0], args[1], args[2] = "evalsha", s.sha, nkeys
	return append(args, keysAndArgv...)
}

// asEval returns the arguments of EVALSHA command args as EVAL with the
// script's source, or nil when args are not a call of one of our scripts.
func asEval(args []any) []any {
	if len(args) < 3 || args[0] != "evalsha" {
		return nil
	}
	sha, _ := args[1].(string)
	s := scriptsBySHA[sha]
	if s == nil {
		return nil
	}
	eval := make([]any, len(args))
	copy(eval, args)
	eval[0], eval[1] = "eval", s.src
	return eval
}
