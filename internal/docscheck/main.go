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
// redirection (-traces traces.json: the command writes it), docscheck's own
// comments (they describe the forms), and zz_*_test.go files (scratch
// tests, ignored by git: their tests do not count as defined).
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
// own that are declared outside this repository (go-redis's options).
var externalNames = map[string]bool{
	"ContextTimeoutEnabled": true,
	"ReadTimeout":           true,
	"MasterName":            true,
	"Ring":                  true,
	"UniversalClient":       true,
}

// An index is what exists: the names the docs are checked against.
type index struct {
	tests   map[string]bool            // top-level Test/Example/Benchmark/Fuzz funcs of *_test.go files
	files   map[string]bool            // every file, slash-separated, relative to the root
	bases   map[string]bool            // every file's base name
	decls   map[string]bool            // the root package's exported package-level names
	types   map[string]map[string]bool // the root package's exported types: their exported methods and fields
	members map[string]bool            // every exported method and field name of the root package
	others  map[string]bool            // exported names declared in the repository's other packages
	// The root package's aliases of internal/engine's types, and those
	// types' exported methods and fields: an alias has its type's.
	aliases map[string]string
	engine  map[string]map[string]bool
}

func newIndex() *index {
	return &index{
		tests: map[string]bool{}, files: map[string]bool{}, bases: map[string]bool{},
		decls: map[string]bool{}, types: map[string]map[string]bool{},
		members: map[string]bool{}, others: map[string]bool{},
		aliases: map[string]string{}, engine: map[string]map[string]bool{},
	}
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
	idx := newIndex()
	var sources []source
	fset := token.NewFileSet()
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
		name := d.Name()
		// zz_*_test.go are reviewers' scratch tests (.gitignore): not in
		// a clone.
		if strings.HasPrefix(name, "zz_") && strings.HasSuffix(name, "_test.go") {
			return nil
		}
		idx.files[rel] = true
		idx.bases[name] = true
		dir := path.Dir(rel)
		inTestdata := slices.Contains(strings.Split(dir, "/"), "testdata")
		switch {
		case strings.HasSuffix(name, ".go") && !inTestdata:
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.HasSuffix(name, "_test.go") {
				idx.addTests(fset, rel, src)
				return nil
			}
			isRoot := idx.addDecls(fset, rel, src, dir == ".")
			if strings.HasPrefix(rel, "internal/docscheck/") {
				return nil // its comments describe the names it looks for
			}
			sources = append(sources, source{name: rel, kind: "go", root: isRoot, text: src})
		case strings.HasSuffix(name, ".lua") && !inTestdata:
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sources = append(sources, source{name: rel, kind: "lua", text: src})
		case isCheckedMarkdown(rel):
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sources = append(sources, source{name: rel, kind: "md", text: src})
		}
		return nil
	})
	return idx, sources, err
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

// addTests indexes the tests, examples, benchmarks and fuzz targets of a
// *_test.go file.
func (idx *index) addTests(fset *token.FileSet, name string, src []byte) {
	f := parse(fset, name, src)
	if f == nil {
		return
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && testName.MatchString(fd.Name.Name) {
			idx.tests[fd.Name.Name] = true
		}
	}
}

// addDecls indexes the exported declarations of a non-test Go file, and
// reports whether it is of the root package (inRoot: in the root
// directory, and package redlock); those of other packages count as others.
func (idx *index) addDecls(fset *token.FileSet, name string, src []byte, inRoot bool) bool {
	f := parse(fset, name, src)
	if f == nil {
		return false
	}
	root := inRoot && f.Name.Name == "redlock"
	decls, members := idx.others, idx.others
	if root {
		decls, members = idx.decls, idx.members
	}
	member := func(typ, name string) {
		if !ast.IsExported(name) {
			return
		}
		if f.Name.Name == "engine" {
			if idx.engine[typ] == nil {
				idx.engine[typ] = map[string]bool{}
			}
			idx.engine[typ][name] = true
		}
		members[name] = true
		if root && ast.IsExported(typ) {
			if idx.types[typ] == nil {
				idx.types[typ] = map[string]bool{}
			}
			idx.types[typ][name] = true
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				if d.Name.IsExported() {
					decls[d.Name.Name] = true
				}
				continue
			}
			member(receiverType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							decls[n.Name] = true
						}
					}
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						decls[s.Name.Name] = true
						if root && idx.types[s.Name.Name] == nil {
							idx.types[s.Name.Name] = map[string]bool{}
						}
						if sel, ok := s.Type.(*ast.SelectorExpr); root && s.Assign.IsValid() && ok {
							idx.aliases[s.Name.Name] = sel.Sel.Name
						}
					}
					for _, m := range fieldNames(s.Type) {
						member(s.Name.Name, m)
					}
				}
			}
		}
	}
	return root
}

// receiverType is the name of a method's receiver type: T of T, *T, T[P].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// fieldNames are a struct type's field names (an embedded field by its
// type's name) or an interface type's method names.
func fieldNames(t ast.Expr) []string {
	var list *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	}
	if list == nil {
		return nil
	}
	var names []string
	for _, f := range list.List {
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		if len(f.Names) == 0 {
			if n := receiverType(f.Type); n != "" {
				names = append(names, n)
			} else if sel, ok := f.Type.(*ast.SelectorExpr); ok {
				names = append(names, sel.Sel.Name)
			}
		}
	}
	return names
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
