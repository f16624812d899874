package main

import (
	"fmt"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// testIndex is an index of a small repository held in memory.
func testIndex(t *testing.T) *index {
	t.Helper()
	idx := newIndex()
	fset := token.NewFileSet()
	for name, src := range map[string]string{
		"redlock.go": `package redlock

// Client is a client.
type Client struct{ Logger int }

// Lock is a lock.
type Lock struct{}

// ErrNotHeld is an error.
var ErrNotHeld error

// WithRestartGuard is an option.
func WithRestartGuard() {}

// New makes a Client.
func New() *Client { return nil }

// TryLock tries.
func (c *Client) TryLock() {}

// Fence fences.
func (l *Lock) Fence() {}

func (l *Lock) unexported() {}
`,
		"internal/chaos/schedule.go": `package chaos

// Schedule is a schedule.
type Schedule struct{}
`,
	} {
		idx.files[name] = true
		idx.bases[name[strings.LastIndex(name, "/")+1:]] = true
		idx.addDecls(fset, name, []byte(src), !strings.Contains(name, "/"))
	}
	for name, src := range map[string]string{
		"redlock_test.go": `package redlock

import "testing"

func TestPitfall4_ReleaseEverything(t *testing.T) {}
func TestChaos(t *testing.T)                       {}
func ExampleClient_Lock()                          {}
func helper(t *testing.T)                          {}
`,
		"bench/peers/peers_test.go": `package peers

import "testing"

func BenchmarkContended(b *testing.B) {}
func FuzzValidity(f *testing.F)       {}
`,
	} {
		idx.files[name] = true
		idx.bases[name[strings.LastIndex(name, "/")+1:]] = true
		idx.addTests(fset, name, []byte(src))
	}
	for _, name := range []string{"lua/acquire.lua", "scripts/race.sh", "internal/chaos/proxy.go", "acl_test.go"} {
		idx.files[name] = true
		idx.bases[name[strings.LastIndex(name, "/")+1:]] = true
	}
	return idx
}

// names returns the findings as "line kind name".
func names(found []finding) []string {
	var out []string
	for _, f := range found {
		out = append(out, fmt.Sprintf("%02d %s %s", f.line, f.kind, f.name))
	}
	return out
}

func TestMarkdownAcceptsWhatExists(t *testing.T) {
	idx := testIndex(t)
	md := "# Title\n" +
		"`TestChaos/18_a_hung_master` and `TestPitfall4_…`, `ExampleClient_Lock`, BenchmarkContended and FuzzValidity.\n" +
		"See [acl_test.go](acl_test.go), lua/acquire.lua, `lua/*.lua`, ./scripts/race.sh, chaos/proxy.go, *_test.go.\n" +
		"`WithRestartGuard`, `ErrNotHeld`, `Lock.Fence`, `Client.TryLock`, `(*Lock).Fence`, `Client.Logger`, `New()`.\n" +
		"`redis.Client.Do`, `redis.ErrClosed`, `slog.Logger`, `context.Context`, `sync.Mutex.Lock`, `SET`, `PTTL`, `Ring`.\n" +
		"`Schedule`, `Fence()`, `TryLock`, `go test -run 'TestChaos/(18|20)' .`, https://pkg.go.dev/x/y.go, vuln.go.dev.\n" +
		"Tests, Tested, Examples, Benchmarks and Without a lock: prose. Testing and Fuzzy need a capital.\n" +
		"```go\nl, err := redlock.New(nodes, redlock.WithRestartGuard())\nerr = c.Lock(ctx) // Lock.Missing in a fence is code, not a name\n```\n" +
		"go run . -traces traces.json > out.json\n"
	if found := idx.checkMarkdown("README.md", md); len(found) > 0 {
		t.Errorf("findings for names that exist: %v", found)
	}
}

func TestMarkdownFindsWhatDoesNotExist(t *testing.T) {
	idx := testIndex(t)
	md := "intro\n" +
		"`TestGone` covers it; TestChaos/1 and TestAlsoGone/sub do too, `TestNone…` some more.\n" +
		"See acl_gone_test.go, lua/gone.lua, `lua/*.json`, scripts/gone.sh, docs/x.md.\n" +
		"`WithGone`, `ErrGone`, `Lock.Gone`, `Client.TryGone`, `(*Lock).Gone`, `Gone()`.\n" +
		"```go\nredlock.New(nodes, redlock.WithoutGone())\n```\n"
	got := names(idx.checkMarkdown("README.md", md))
	want := []string{
		"02 test TestGone", "02 test TestAlsoGone", "02 test TestNone…",
		"03 file acl_gone_test.go", "03 file lua/gone.lua", "03 file lua/*.json", "03 file scripts/gone.sh", "03 file docs/x.md",
		"04 identifier WithGone", "04 identifier ErrGone", "04 identifier Lock.Gone", "04 identifier Client.TryGone",
		"04 identifier Gone",
		"06 identifier redlock.WithoutGone",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n got %q\nwant %q", got, want)
	}
}

func TestGoCommentsAreChecked(t *testing.T) {
	idx := testIndex(t)
	src := `package redlock

// Lock.Fence and WithRestartGuard exist (TestChaos, lua/acquire.lua);
// Lock.Gone, ErrGone and TestGone do not, nor does lua/gone.lua.
/* redlock.Client.TryLock, but not redlock.Gone */
func x() { _ = "TestInAString" }
`
	got := names(idx.checkGo("x.go", []byte(src), true))
	want := []string{
		"04 test TestGone", "04 file lua/gone.lua", "04 identifier Lock.Gone", "04 identifier ErrGone",
		"05 identifier redlock.Gone",
	}
	if !slices.Equal(got, want) {
		t.Errorf("root package findings:\n got %q\nwant %q", got, want)
	}
	// In another package, Lock.Gone and ErrGone may be its own.
	got = names(idx.checkGo("cmd/x/x.go", []byte(strings.Replace(src, "package redlock", "package main", 1)), false))
	want = []string{"04 test TestGone", "04 file lua/gone.lua", "05 identifier redlock.Gone"}
	if !slices.Equal(got, want) {
		t.Errorf("other package findings:\n got %q\nwant %q", got, want)
	}
}

func TestLuaCommentsAreChecked(t *testing.T) {
	idx := testIndex(t)
	lua := "-- See handoff.go and TestChaos.\nlocal x = 'TestGone' -- TestGone, gone.go\n"
	idx.bases["handoff.go"] = true
	got := names(idx.checkLua("lua/x.lua", lua))
	want := []string{"02 test TestGone", "02 file gone.go"}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n got %q\nwant %q", got, want)
	}
}

func TestCodeSpans(t *testing.T) {
	for line, want := range map[string][]string{
		"a `b` c ``d ` e`` f":   {"b", "d ` e"},
		"no spans":              nil,
		"`open":                 nil,
		"`a` and `b`, ```c```.": {"a", "b", "c"},
	} {
		if got := codeSpans(line); !slices.Equal(got, want) {
			t.Errorf("codeSpans(%q) = %q, want %q", line, got, want)
		}
	}
}

// TestTheRepositoryIsLoaded runs load on the repository itself: it finds
// this test, the root package's types and its README.
func TestTheRepositoryIsLoaded(t *testing.T) {
	idx, sources, err := load("../..")
	if err != nil {
		t.Fatal(err)
	}
	if !idx.tests["TestTheRepositoryIsLoaded"] || !idx.files["internal/docscheck/main.go"] || idx.types["Lock"] == nil || !idx.decls["ErrNotHeld"] {
		t.Fatal("load missed this test, this file, type Lock or ErrNotHeld")
	}
	if !slices.ContainsFunc(sources, func(s source) bool { return s.name == "README.md" }) {
		t.Error("load did not return README.md")
	}
}
