// The Lua scripts every step runs on a master, one file each in lua/: each
// step is atomic on its master (pitfalls 1 and 6).

package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// memoryLua defines memory(), for the scripts that vote: see the
	// restart guard (guard.go).
	//go:embed lua/memory.lua
	memoryLua string

	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(memoryLua + acquireLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/handoff.lua
	handoffLua    string
	handoffScript = redis.NewScript(memoryLua + handoffLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(memoryLua + extendLua)

	//go:embed lua/fence.lua
	fenceLua    string
	fenceScript = redis.NewScript(fenceLua)
)
