// The Lua scripts every step runs on a master, one file each in lua/: each
// step is atomic on its master (pitfalls 1 and 6).

package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed lua/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)

	//go:embed lua/handoff.lua
	handoffLua    string
	handoffScript = redis.NewScript(handoffLua)

	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed lua/fence.lua
	fenceLua    string
	fenceScript = redis.NewScript(fenceLua)
)
