package script

import (
	"strings"
	"testing"
)

// scripts are every script's body, by name.
var scripts = map[string]struct {
	body string
	s    *Script
}{
	"acquire":       {acquireLua, Acquire},
	"release":       {releaseLua, Release},
	"handoff":       {handoffLua, HandOff},
	"extend":        {extendLua, Extend},
	"fence":         {fenceLua, Fence},
	"acquire_multi": {acquireMultiLua, AcquireMulti},
	"extend_multi":  {extendMultiLua, ExtendMulti},
	"release_multi": {releaseMultiLua, ReleaseMulti},
	"fence_multi":   {fenceMultiLua, FenceMulti},
	"guard_check":   {guardCheckLua, GuardCheck},
	"inspect":       {inspectLua, Inspect},
}

func TestEveryHelperIsAFunction(t *testing.T) {
	src := tokenLua + memoryLua
	var names []string
	for _, h := range helpers {
		names = append(names, h.name)
	}
	if want := len(helperDef.FindAllString(src, -1)); len(helpers) != want {
		t.Fatalf("helpers %v: %d, the sources define %d", names, len(helpers), want)
	}
	var joined strings.Builder
	for _, h := range helpers {
		joined.WriteString(h.src)
	}
	if strings.TrimSpace(joined.String()) != strings.TrimSpace(src) {
		t.Error("the helpers put together are not token.lua and memory.lua")
	}
}

func TestEachScriptDefinesExactlyTheHelpersItCalls(t *testing.T) {
	for name, sc := range scripts {
		src := sc.s.Source.(string)
		if !strings.HasSuffix(src, sc.body) {
			t.Errorf("%s: its source does not end with its body", name)
		}
		for _, h := range helpers {
			defined := strings.Count(src, "local function "+h.name+"(")
			called := calls(code(strings.ReplaceAll(src, "local function "+h.name+"(", "")), h.name)
			if defined > 1 || (defined == 1) != called {
				t.Errorf("%s: %s defined %d times, called: %v", name, h.name, defined, called)
			}
		}
	}
}

func TestAScriptIsGivenNoHelperItDoesNotCall(t *testing.T) {
	for name, none := range map[string][]string{
		"release":     {"wanted", "mark", "memory", "ballot"},
		"acquire":     {"wanted", "named"},
		"handoff":     {"mark", "ballot"},
		"fence":       {"fingerprint", "publish", "memory"},
		"guard_check": {"ours", "ballot"},
		"inspect":     {"ours", "memory"},
	} {
		for _, h := range none {
			if strings.Contains(scripts[name].s.Source.(string), "local function "+h+"(") {
				t.Errorf("%s is given %s, which it does not call", name, h)
			}
		}
	}
}

func TestPreludeFollowsTheHelpersCalls(t *testing.T) {
	hs := splitHelpers("-- a\nlocal function a(x)\n  return b(x)\nend\n\nlocal function b(x)\n  return x\nend\n-- c: calls a( only here\nlocal function c()\n  return redis.a(1) .. s:b(2)\nend\n")
	for body, want := range map[string]string{
		"return a(1)":                "ab",
		"return b(1)":                "b",
		"return c()":                 "c",
		"-- a(1)\nreturn 1":          "",
		"return redis.a(1), xa(2)":   "",
		"local r = c() return a(r)":  "abc",
		"return bb(1) .. ab(2)":      "",
		"return {a = 1}, (b)(2)":     "",
		"return string.format(a(1))": "ab",
	} {
		var got string
		p := prelude(body, hs)
		for _, h := range hs {
			if strings.Contains(p, "local function "+h.name+"(") {
				got += h.name
			}
		}
		if got != want {
			t.Errorf("prelude of %q: %q, want %q", body, got, want)
		}
	}
}

func TestSplitHelpersRefusesWhatIsNotAFunction(t *testing.T) {
	for _, src := range []string{
		"local x = 1\n",
		"local function a()\nend\nlocal y = 2\n",
		"local z = 3\nlocal function a()\nend\n",
		"local function a()\nlocal function b()\nend\n",
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("splitHelpers(%q) took it", src)
				}
			}()
			splitHelpers(src)
		}()
	}
}
