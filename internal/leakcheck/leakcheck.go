// Package leakcheck finds goroutines that a test left running: the
// module's own few lines in place of a dependency (go.uber.org/goleak), so
// that programs importing redlock find no test-only module in their graph.
//
// A goroutine counts when its stack holds a frame outside the runtime, the
// testing package, os/signal and the test binary's main; goroutines the runtime hides from
// runtime.Stack (the garbage collector's, say) never do. Leaks are looked
// for again for a while before they are reported, since a goroutine that
// was told to stop may need a moment to return.
package leakcheck

import (
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Wait is how long Check waits for goroutines to end.
const Wait = 5 * time.Second

// A Set is the goroutines running at one moment, by ID.
type Set map[int]bool

// Current returns the goroutines running now, for a later Check to ignore.
func Current() Set {
	s := Set{}
	for _, g := range running() {
		s[g.id] = true
	}
	return s
}

// Check waits up to Wait for every goroutine not in before, and whose
// stack names none of the functions in ignore (full names, as in a stack
// trace: "pkg/path.(*Type).Method"), to end. It returns nil when they did,
// and otherwise an error with their stacks.
func Check(before Set, ignore ...string) error {
	deadline := time.Now().Add(Wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		leaks := find(before, ignore)
		if len(leaks) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "leakcheck: %d goroutines still running after %v:\n", len(leaks), Wait)
			for _, g := range leaks {
				b.WriteString("\n" + g.stack + "\n")
			}
			return fmt.Errorf("%s", b.String())
		}
		time.Sleep(pause) // no signal exists for another goroutine's return
	}
}

// VerifyNone fails t when Check finds leaks.
func VerifyNone(t testing.TB, before Set, ignore ...string) {
	t.Helper()
	if err := Check(before, ignore...); err != nil {
		t.Error(err)
	}
}

// Main runs the tests of m, and then, if they passed, fails the run when a
// goroutine outlived them. Call it from TestMain.
func Main(m *testing.M, ignore ...string) {
	code := m.Run()
	if code == 0 {
		if err := Check(nil, ignore...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

type goroutine struct {
	id    int
	stack string
	funcs []string // the functions on its stack, innermost first
}

// find returns the goroutines that count, apart from the caller's.
func find(before Set, ignore []string) []goroutine {
	var leaks []goroutine
	self := running()[0].id // runtime.Stack lists the caller first
	for _, g := range running() {
		if g.id == self || before[g.id] || !counts(g) || names(g, ignore) {
			continue
		}
		leaks = append(leaks, g)
	}
	return leaks
}

// counts reports whether g runs anything beyond the runtime's and the test
// framework's own machinery.
func counts(g goroutine) bool {
	for _, f := range g.funcs {
		if !strings.HasPrefix(f, "runtime.") && !strings.HasPrefix(f, "testing.") &&
			!strings.HasPrefix(f, "os/signal.") && !strings.HasPrefix(f, "internal/") &&
			f != "main.main" {
			return true
		}
	}
	return false
}

func names(g goroutine, funcs []string) bool {
	for _, want := range funcs {
		for _, f := range g.funcs {
			if f == want {
				return true
			}
		}
	}
	return false
}

var header = regexp.MustCompile(`^goroutine (\d+) \[`)

// Stacks returns runtime.Stack's report of every goroutine, whatever its
// length.
func Stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// running parses runtime.Stack's report of every goroutine.
func running() []goroutine {
	var gs []goroutine
	for _, block := range strings.Split(Stacks(), "\n\n") {
		lines := strings.Split(block, "\n")
		m := header.FindStringSubmatch(lines[0])
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		g := goroutine{id: id, stack: block}
		for _, l := range lines[1:] {
			if l == "" || strings.HasPrefix(l, "\t") {
				continue // a file:line
			}
			l = strings.TrimPrefix(l, "created by ")
			if i := strings.LastIndex(l, "("); i > 0 && strings.HasSuffix(l, ")") {
				l = l[:i] // the arguments
			}
			if i := strings.Index(l, " in goroutine "); i > 0 {
				l = l[:i]
			}
			g.funcs = append(g.funcs, l)
		}
		gs = append(gs, g)
	}
	return gs
}
