// The helpers a script is given: those of token.lua and memory.lua that it
// calls, and those they call, never the rest.

package script

import (
	"fmt"
	"regexp"
	"strings"
)

// A helper is one function of token.lua or memory.lua: its name, and its
// source with the comment before it.
type helper struct {
	name, src string
}

// helpers are the functions token.lua and memory.lua define, in their
// order.
var helpers = splitHelpers(tokenLua + memoryLua)

// helperDef is the line that opens a helper: "local function name(" at the
// start of a line.
var helperDef = regexp.MustCompile(`(?m)^local function ([a-z_]+)\(`)

// splitHelpers cuts src into its functions. Each opens with "local
// function name(" at the start of a line, after its comment, and closes
// with "end" alone on a line; nothing but blank lines and comments lies
// outside them. It panics on a source not so made, which only an edit of
// the Lua files can cause (TestEveryHelperIsAFunction).
func splitHelpers(src string) []helper {
	var hs []helper
	for rest := src; strings.TrimSpace(rest) != ""; {
		end := strings.Index(rest, "\nend\n")
		if end < 0 {
			panic(fmt.Sprintf("script: helpers end without a function: %q", rest))
		}
		block := rest[:end+len("\nend\n")]
		rest = rest[len(block):]
		defs := helperDef.FindAllStringSubmatchIndex(block, -1)
		if len(defs) != 1 || strings.TrimSpace(code(block[:defs[0][0]])) != "" {
			panic(fmt.Sprintf("script: a helper is not one function after its comment: %q", block))
		}
		hs = append(hs, helper{name: block[defs[0][2]:defs[0][3]], src: block})
	}
	return hs
}

// withHelpers is the script body with the helpers it calls (prelude).
func withHelpers(body string) *Script {
	return newLuaScript(prelude(body, helpers) + body)
}

// prelude is the source of the helpers body calls, and of those they call,
// in their order in hs. A script pays for each helper it is given on every
// call (Lua makes its closure anew), so it is given no other.
func prelude(body string, hs []helper) string {
	text := code(body)
	used := make([]bool, len(hs))
	for grew := true; grew; {
		grew = false
		for i, h := range hs {
			if !used[i] && calls(text, h.name) {
				used[i], grew = true, true
				text += code(h.src)
			}
		}
	}
	var src strings.Builder
	for i, h := range hs {
		if used[i] {
			src.WriteString(h.src)
		}
	}
	return src.String()
}

// calls reports whether Lua code text calls the function name: name( not
// part of a longer name, nor a field (redis.name, s:name).
func calls(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name+"(")
		if j < 0 {
			return false
		}
		at := i + j
		if at == 0 || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:", rune(text[at-1])) {
			return true
		}
		i = at + len(name)
	}
}

// code is Lua source src without its comments ("--" to the end of a line;
// no script has "--" in a string).
func code(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i] + "\n"
		}
		b.WriteString(line)
	}
	return b.String()
}
