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
	"go/scanner"
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

// checkText checks the names of tests, files and redlock.Name in a line
// of any doc.
func (idx *index) checkText(file, text string, add func(kind, name string)) {
	for _, m := range testRef.FindAllStringSubmatch(text, -1) {
		name, prefix := m[1], m[2] != ""
		if !idx.testExists(name, prefix) {
			if prefix {
				name += "…"
			}
			add("test", name)
		}
	}
	for _, r := range pathRun.FindAllStringIndex(text, -1) {
		p, ok := pathLike(text[r[0]:r[1]])
		if !ok || (!strings.Contains(p, "/") && outputArg.MatchString(text[:r[0]])) {
			continue
		}
		if !idx.fileExists(file, p) {
			add("file", p)
		}
	}
	for _, m := range qualified.FindAllStringSubmatch(text, -1) {
		if name, ok := idx.member(m[1], m[2], true); !ok {
			add("identifier", "redlock."+name)
		}
	}
}

// checkCode checks a markdown code span, or a line of a root package
// comment: Type.Name for the root package's types, and With…, Without…
// and Err… names.
func (idx *index) checkCode(text string, add func(kind, name string)) {
	for _, m := range typeMember.FindAllStringSubmatch(text, -1) {
		if idx.types[m[1]] == nil {
			continue // not a type of ours (redis.Client is excluded by the regexp)
		}
		if name, ok := idx.member(m[1], m[2], false); !ok {
			add("identifier", name)
		}
	}
	for _, m := range optionOrErr.FindAllStringSubmatch(text, -1) {
		if !idx.decls[m[1]] {
			add("identifier", m[1])
		}
	}
}

// member reports whether name (and, when not empty, sel: a method or field
// of name) is declared in the root package. With needDecl false, name is
// known to be a type. It returns the name as written.
func (idx *index) member(name, sel string, needDecl bool) (string, bool) {
	full := name
	if sel != "" {
		full += "." + sel
	}
	if needDecl && !idx.decls[name] {
		return full, false
	}
	if sel == "" {
		return full, true
	}
	ms, isType := idx.types[name]
	if !isType {
		return full, true // a variable's or function's selector: not checked
	}
	if of, ok := idx.aliases[name]; ok && idx.engine[of][sel] {
		return full, true
	}
	return full, ms[sel]
}

// testExists reports whether a test of that name exists, or with prefix,
// one whose name begins with it.
func (idx *index) testExists(name string, prefix bool) bool {
	if idx.tests[name] {
		return true
	}
	if prefix {
		for t := range idx.tests {
			if strings.HasPrefix(t, name) {
				return true
			}
		}
	}
	return false
}

// pathLike returns the path a run of path characters names, if it looks
// like a path in the repository: it ends in a checked extension and is
// neither absolute, nor in a home or variable, nor a URL's.
func pathLike(run string) (string, bool) {
	run = strings.TrimRight(run, ".")
	run = strings.TrimPrefix(run, "...")
	if !pathExt.MatchString(run) {
		return "", false
	}
	if strings.ContainsAny(run[:1], "/~$") || strings.Contains(run, "$") {
		return "", false
	}
	if first, _, found := strings.Cut(run, "/"); found && strings.Contains(strings.TrimLeft(first, "."), ".") {
		return "", false // a host: github.com/…, pkg.go.dev/…
	}
	return run, true
}

// fileExists reports whether the path p, named in file, exists.
func (idx *index) fileExists(file, p string) bool {
	if strings.Contains(p, "*") {
		for f := range idx.files {
			target := f
			if !strings.Contains(p, "/") {
				target = path.Base(f)
			}
			if ok, _ := path.Match(p, target); ok {
				return true
			}
		}
		return false
	}
	if !strings.Contains(p, "/") {
		return idx.bases[p]
	}
	for _, c := range []string{path.Clean(p), path.Join(path.Dir(file), p)} {
		if idx.files[c] {
			return true
		}
	}
	tail := "/" + strings.TrimLeft(path.Clean(p), "./")
	for f := range idx.files {
		if strings.HasSuffix(f, tail) {
			return true
		}
	}
	return false
}

// checkMarkdown checks a markdown document.
func (idx *index) checkMarkdown(file, text string) []finding {
	var found []finding
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		add := func(kind, name string) { found = append(found, finding{file, i + 1, kind, name}) }
		idx.checkText(file, line, add)
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		for _, span := range codeSpans(line) {
			idx.checkCode(span, add)
			if m := loneName.FindStringSubmatch(strings.TrimSpace(span)); m != nil {
				if n := m[1]; hasLower.MatchString(n) && !testName.MatchString(n) && !idx.nameExists(n) {
					add("identifier", n)
				}
			}
		}
	}
	return dedupe(found)
}

// dedupe drops repeated findings of a name on one line (two rules, or two
// forms of it: Lock.Fence and (*Lock).Fence), keeping the first.
func dedupe(found []finding) []finding {
	seen := map[finding]bool{}
	return slices.DeleteFunc(found, func(f finding) bool {
		dup := seen[f]
		seen[f] = true
		return dup
	})
}

// nameExists reports whether an exported name written alone exists: in
// the root package, as a method or field of its types, in another package
// of the repository, or in externalNames.
func (idx *index) nameExists(n string) bool {
	return idx.decls[n] || idx.members[n] || idx.others[n] || externalNames[n]
}

// codeSpans returns the inline code spans of a markdown line: text between
// runs of as many backticks.
func codeSpans(line string) []string {
	var spans []string
	for {
		start := strings.IndexByte(line, '`')
		if start < 0 {
			return spans
		}
		n := start
		for n < len(line) && line[n] == '`' {
			n++
		}
		ticks := line[start:n]
		rest := line[n:]
		end := strings.Index(rest, ticks)
		for end >= 0 && end+len(ticks) < len(rest) && rest[end+len(ticks)] == '`' {
			next := strings.Index(rest[end+len(ticks)+1:], ticks)
			if next < 0 {
				end = -1
				break
			}
			end += len(ticks) + 1 + next
		}
		if end < 0 {
			return spans
		}
		spans = append(spans, rest[:end])
		line = rest[end+len(ticks):]
	}
}

// checkGo checks the comments of a Go file; root tells whether it is of
// the root package, whose comments name its identifiers without redlock.
func (idx *index) checkGo(file string, src []byte, root bool) []finding {
	var found []finding
	fset := token.NewFileSet()
	tf := fset.AddFile(file, -1, len(src))
	var s scanner.Scanner
	s.Init(tf, src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return dedupe(found)
		}
		if tok != token.COMMENT || strings.HasPrefix(lit, "//go:") {
			continue
		}
		first := tf.Line(pos)
		for j, line := range strings.Split(lit, "\n") {
			add := func(kind, name string) { found = append(found, finding{file, first + j, kind, name}) }
			idx.checkText(file, line, add)
			if root {
				idx.checkCode(line, add)
			}
		}
	}
}

// checkLua checks the comments of a Lua script: lines from "--" on.
func (idx *index) checkLua(file, text string) []finding {
	var found []finding
	for i, line := range strings.Split(text, "\n") {
		c := strings.Index(line, "--")
		if c < 0 {
			continue
		}
		idx.checkText(file, line[c:], func(kind, name string) {
			found = append(found, finding{file, i + 1, kind, name})
		})
	}
	return dedupe(found)
}
