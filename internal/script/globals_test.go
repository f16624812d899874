package script

import (
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// redisGlobals are the globals Redis 7 gives a script that ours may read.
// A script that reads any other name reads nil there: a helper it calls
// but was not given fails as "attempt to call a nil value" on the branch
// that calls it, and only there.
var redisGlobals = []string{
	"ARGV", "KEYS", "math", "pcall", "redis", "string", "table", "tonumber", "tostring", "type",
}

// globalsOf is every global name the Lua source src reads and writes, in
// its functions too, compiled by gopher-lua (Lua 5.1, as Redis runs).
func globalsOf(t *testing.T, name, src string) (read, written []string) {
	t.Helper()
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var walk func(p *lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, inst := range p.Code {
			// An instruction's opcode is its top 6 bits, and a global's
			// name is the constant its low 18 bits (Bx) index.
			op, bx := int(inst>>26), int(inst&0x3ffff)
			switch op {
			case lua.OP_GETGLOBAL:
				read = append(read, p.Constants[bx].String())
			case lua.OP_SETGLOBAL:
				written = append(written, p.Constants[bx].String())
			}
		}
		for _, q := range p.FunctionPrototypes {
			walk(q)
		}
	}
	walk(proto)
	return read, written
}

// Every branch of every script finds each helper it calls: its source, as
// sent, reads no global but Redis's own and writes none.
func TestNoScriptReadsAGlobalRedisDoesNotDefine(t *testing.T) {
	for name, s := range scripts {
		read, written := globalsOf(t, name, s.s.Source.(string))
		for _, g := range read {
			if !slices.Contains(redisGlobals, g) {
				t.Errorf("%s reads the global %q: a helper it was not given, or a name Redis does not define", name, g)
			}
		}
		if len(written) > 0 {
			t.Errorf("%s writes the globals %q: Redis refuses a script that does", name, written)
		}
	}
}

// The check finds a helper a script calls and was not given.
func TestTheGlobalsCheckFindsAMissingHelper(t *testing.T) {
	body := "return ours(ARGV[1], ARGV[2])"
	without := slices.DeleteFunc(slices.Clone(helpers), func(h helper) bool { return h.name == "ours" })
	read, _ := globalsOf(t, "ours-left-out", prelude(body, without)+body)
	if !slices.Contains(read, "ours") {
		t.Fatalf("globals read %q: the missing helper ours is not among them", read)
	}
	read, _ = globalsOf(t, "ours-given", prelude(body, helpers)+body)
	if slices.Contains(read, "ours") {
		t.Fatalf("globals read %q: ours was given", read)
	}
}
