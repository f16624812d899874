// Command docscheck fails when the docs name something that does not exist:
// README.md, CONTRIBUTING.md, docs/*.md, and the comments of every non-test
// .go file and of lua/*.lua (CHANGELOG.md is history, and is not checked).
//
//	go run ./internal/docscheck # from the repository root (make check)
//
// It looks for three kinds of name:
//
//   - a test, example, benchmark or fuzz target (TestXxx, ExampleXxx,
//     BenchmarkXxx, FuzzXxx; of TestXxx/sub only TestXxx), which must be
//     defined in a *_test.go file of the repository, any module; one
//     written as a prefix (TestXxx…, TestXxx*) must begin one;
//   - a file path ending in .go, .lua, .sh, .md, .yml or .json, which must
//     exist: relative to the repository root or to the file naming it, or
//     as the tail of a path that does; a bare file name anywhere in the
//     repository; a pattern (lua/*.lua) must match a file;
//   - an exported identifier of the root package: redlock.Name anywhere;
//     and, in markdown code spans and the root package's comments, Type.Name
//     where Type is a type of the root package, and names that begin with
//     With, Without or Err. A markdown code span that is a single exported
//     name (`Resume`, `Until()`) must be declared in the repository (any
//     package, any type's method or field) or be one of a few names of
//     go-redis (externalNames).
//
// Not checked: a bare file name given to a command-line flag or a
// redirection (-traces traces.json: the command writes it), docscheck's and
// examplecheck's own comments (they describe the forms), and zz_*_test.go
// files (scratch tests, ignored by git: their tests do not count as
// defined).
//
// It prints each missing name as file:line and exits 1 if there is any.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// modulePath is the root module's path: docscheck runs from its directory.
const modulePath = "github.com/redlock-go/redlock"

// externalNames are exported names the docs write in code spans of their
// own that are declared outside this repository (go-redis's options, and
// the peers' names the README compares with).
var externalNames = map[string]bool{
	"DialContext":           true, // gomodule/redigo's Pool
	"ErrFailed":             true, // go-redsync/redsync
	"WithFailFast":          true, // go-redsync/redsync
	"ErrLockNotHeld":        true, // bsm/redislock
	"ContextTimeoutEnabled": true,
	"ReadTimeout":           true,
	"MasterName":            true,
	"Ring":                  true,
	"UniversalClient":       true,
}

// A finding is a name a doc gives that does not exist.
type finding struct {
	file string
	line int
	kind string // "test", "file" or "identifier"
	name string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s %s does not exist", f.file, f.line, f.kind, f.name)
}

func main() {
	if err := checkRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	idx, sources, err := load(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(2)
	}
	var found []finding
	for _, s := range sources {
		found = append(found, s.check(idx)...)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > 0 {
		fmt.Fprintf(os.Stderr, "docscheck: %d names in the docs do not exist\n", len(found))
		os.Exit(1)
	}
}

// checkRoot makes sure docscheck runs from the root module's directory.
func checkRoot() error {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		return fmt.Errorf("run from the repository root: %w", err)
	}
	if !bytes.Contains(mod, []byte("module "+modulePath+"\n")) {
		return fmt.Errorf("run from the repository root: go.mod is not %s's", modulePath)
	}
	return nil
}

// A source is a document to check: markdown, the comments of a Go file, or
// those of a Lua script.
type source struct {
	name string // slash path relative to the root
	kind string // "md", "go" or "lua"
	root bool   // a Go file of the root package
	text []byte
}

func (s source) check(idx *index) []finding {
	switch s.kind {
	case "md":
		return idx.checkMarkdown(s.name, string(s.text))
	case "go":
		return idx.checkGo(s.name, s.text, s.root)
	default:
		return idx.checkLua(s.name, string(s.text))
	}
}

// load walks the repository at root: it indexes what exists and returns
// the sources to check.
func load(root string) (*index, []source, error) {
	l := loader{idx: newIndex(), fset: token.NewFileSet()}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		return l.file(p, rel, d.Name())
	})
	return l.idx, l.sources, err
}

// A loader reads the repository's files into the index and the sources.
type loader struct {
	idx     *index
	sources []source
	fset    *token.FileSet
}

// file indexes the file at p (rel to the root), and keeps it as a source
// to check when it is Go, Lua or checked Markdown.
func (l *loader) file(p, rel, name string) error {
	// zz_*_test.go are reviewers' scratch tests (.gitignore): not in a
	// clone.
	if strings.HasPrefix(name, "zz_") && strings.HasSuffix(name, "_test.go") {
		return nil
	}
	l.idx.files[rel] = true
	l.idx.bases[name] = true
	dir := path.Dir(rel)
	inTestdata := slices.Contains(strings.Split(dir, "/"), "testdata")
	kind := ""
	switch {
	case strings.HasSuffix(name, ".go") && !inTestdata:
		kind = "go"
	case strings.HasSuffix(name, ".lua") && !inTestdata:
		kind = "lua"
	case isCheckedMarkdown(rel):
		kind = "md"
	default:
		return nil
	}
	src, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	s := source{name: rel, kind: kind, text: src}
	if kind == "go" {
		if strings.HasSuffix(name, "_test.go") {
			l.idx.addTests(l.fset, rel, src)
			return nil
		}
		s.root = l.idx.addDecls(l.fset, rel, src, dir == ".")
		if strings.HasPrefix(rel, "internal/docscheck/") || strings.HasPrefix(rel, "internal/examplecheck/") {
			return nil // their comments describe the names they look for
		}
	}
	l.sources = append(l.sources, s)
	return nil
}

// isCheckedMarkdown reports whether the markdown file at rel is checked:
// the root's README.md and CONTRIBUTING.md, and docs/*.md.
func isCheckedMarkdown(rel string) bool {
	switch rel {
	case "README.md", "CONTRIBUTING.md":
		return true
	}
	ok, _ := path.Match("docs/*.md", rel)
	return ok
}

// parse parses a Go file's declarations. A file that does not parse (being
// edited, say) still gives what the parser found, with a warning.
func parse(fset *token.FileSet, name string, src []byte) *ast.File {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		fmt.Fprintf(os.Stderr, "docscheck: warning: %v\n", err)
	}
	return f
}

var (
	// testName is a test, example, benchmark or fuzz target's name, as
	// declared.
	testName = regexp.MustCompile(`^(?:Test|Example|Benchmark|Fuzz)(?:$|[^a-z])`)
	// testRef is a test named in a doc: group 1 its top-level name, group
	// 2 an ellipsis or star that makes it a prefix.
	testRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])((?:Test|Example|Benchmark|Fuzz)[A-Z0-9_][A-Za-z0-9_]*)(…|\.\.\.|\*)?`)
	// pathRun is a run of the characters a path is made of.
	pathRun = regexp.MustCompile(`[A-Za-z0-9_.*/~$-]+`)
	// outputArg ends with a command-line flag or a redirection, whose file
	// (a bare name) the command writes: -traces traces.json, > out.json.
	outputArg = regexp.MustCompile(`(?:(?:^|\s)--?[A-Za-z][A-Za-z0-9-]*[ =]|>\s*)$`)
	// pathExt is the extensions of the paths checked.
	pathExt = regexp.MustCompile(`[A-Za-z0-9_*]\.(?:go|lua|sh|md|yml|json)$`)
	// qualified is redlock.Name or redlock.Type.Name.
	qualified = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])redlock\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)
	// typeMember is Type.Name, or (*Type).Name.
	typeMember = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(?:\(\*)?([A-Z][A-Za-z0-9_]*)\)?\.([A-Z][A-Za-z0-9_]*)`)
	// optionOrErr is a name that begins with With, Without or Err.
	optionOrErr = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])((?:With|Without|Err)[A-Z][A-Za-z0-9_]*)`)
	// loneName is a code span that is one exported name, or a call of it
	// without arguments.
	loneName = regexp.MustCompile(`^\*?([A-Z][A-Za-z0-9_]*)(?:\(\)|\(…\)|\(\.\.\.\))?$`)
	// hasLower tells a CamelCase name from a Redis command (SET, PTTL).
	hasLower = regexp.MustCompile(`[a-z]`)
)
