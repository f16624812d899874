// A mutant's build: a copy of the module with the bug applied, its test
// binary (pruned to the killers), and running the killers.

package main

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A build is one mutant applied to a fresh copy of the module, and its
// test binary; verdict is set when it could not be made.
type build struct {
	m               mutant
	dir, bin        string
	runDir          string // the killers' package directory: where the binary runs
	verdict, detail string
	note            string        // on how it was built
	took, ran       time.Duration // building it; running its tests
	env             []string      // for its test binary: which mutant, in a shared build
	shared          bool          // the build holds other mutants too: remove it once, at the end
}

// buildShared puts what it can of chosen into one build (schemata.go), and
// returns it, with the indexes of the mutants it holds; nil when it could
// not be made (then every mutant is built alone).
func buildShared(root string, chosen []mutant, timeout time.Duration) (*build, map[int]bool) {
	start := time.Now()
	dir, in, err := schemata(root, chosen)
	b := &build{dir: dir, runDir: filepath.Join(dir, enginePkg), shared: true}
	if err == nil && len(in) > 0 {
		var out []byte
		b.bin, out, err = buildSchemata(dir, enginePkg, timeout)
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, tail(out))
		}
	}
	b.took = time.Since(start)
	if err != nil || len(in) == 0 {
		if err != nil {
			fmt.Printf("the shared build failed, so every mutant builds alone: %v\n", err)
		}
		b.shared = false
		b.remove()
		return nil, nil
	}
	return b, in
}

// prepare applies m to a fresh copy of the module and builds the copy's
// test binary, with the fault generator's test when generator is set.
func prepare(root string, m mutant, timeout time.Duration, generator bool) *build {
	b := &build{m: m}
	start := time.Now()
	defer func() { b.took = time.Since(start) }()
	dir, err := os.MkdirTemp("", "redlock-mutant-")
	if err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	b.dir, b.bin = dir, filepath.Join(dir, "mutant.test")
	b.runDir = filepath.Join(dir, m.testDir())
	if err := copyModule(root, dir); err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	if b.verdict, b.detail = m.apply(dir); b.verdict != "" {
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	compile := func() ([]byte, error) { return compileTests(ctx, b.runDir, b.bin) }
	// Builds set the pace of the table, and most of a build is the tests
	// that will not run: the copy keeps only its killers.
	keep := killerNames(m.killers)
	if keep != nil && generator {
		keep = append(keep, "TestChaos")
	}
	saved, err := pruneTests(b.runDir, keep)
	if err != nil {
		b.verdict, b.detail = "ERROR", err.Error()
		return b
	}
	out, err := compile()
	if err != nil && len(saved) > 0 {
		prunedOut := out
		// Something named a test taken out: build the whole package.
		for path, src := range saved {
			if err := os.WriteFile(path, src, 0o644); err != nil {
				b.verdict, b.detail = "ERROR", err.Error()
				return b
			}
		}
		out, err = compile()
		if err == nil {
			b.note = "its pruned copy did not build, the whole one did: " + firstLine(prunedOut)
		}
	}
	if err != nil {
		b.verdict, b.detail = "BROKEN", tail(out) // the mutant did not build
	}
	return b
}

// apply makes m's replacement in the copy of the module in dir; a verdict
// ("STALE", "ERROR") and its detail when it cannot.
func (m mutant) apply(dir string) (verdict, detail string) {
	path := filepath.Join(dir, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		return "ERROR", err.Error()
	}
	if n := bytes.Count(src, []byte(m.from)); n != 1 {
		return "STALE", fmt.Sprintf("%s: the code to mutate occurs %d times, want 1: update the table", m.file, n)
	}
	if err := os.WriteFile(path, bytes.Replace(src, []byte(m.from), []byte(m.to), 1), 0o644); err != nil {
		return "ERROR", err.Error()
	}
	return "", ""
}

// compileTests builds the test binary bin of the package in dir.
// -trimpath: each copy lives in a new directory, and without it every
// package of the module would miss the build cache; -vet=off: make check
// vets the code once.
func compileTests(ctx context.Context, dir, bin string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "-trimpath", "-vet=off", ".")
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// killerNames returns the top-level test functions a killers pattern
// names, or nil when it is not a plain list of names (then nothing is
// pruned).
func killerNames(killers string) []string {
	var names []string
	for _, alt := range strings.Split(killers, "|") {
		name, _, _ := strings.Cut(alt, "/") // a subtest: its top-level test
		name = strings.TrimSuffix(strings.TrimPrefix(name, "^"), "$")
		if !testName.MatchString(name) {
			return nil
		}
		names = append(names, name)
	}
	return names
}

var testName = regexp.MustCompile(`^Test[A-Za-z0-9_]*$`)

// pruneTests takes out of the module root's test files (dir's *_test.go)
// every test, benchmark, fuzz target and example but TestMain and those
// named in keep, and the imports left unused. It returns the files it
// changed, as they were. Nothing is pruned when keep is empty.
func pruneTests(dir string, keep []string) (saved map[string][]byte, err error) {
	if len(keep) == 0 {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	saved = map[string][]byte{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if !pruneFile(f, keep) {
			continue
		}
		var buf bytes.Buffer
		if err := format.Node(&buf, fset, f); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		saved[path] = src
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	return saved, nil
}

// pruneFile removes f's test functions not in keep, with their doc
// comments, and the imports no longer used; it reports whether it removed
// any.
func pruneFile(f *ast.File, keep []string) bool {
	var decls []ast.Decl
	dropped := map[*ast.CommentGroup]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && isTestFunc(fn.Name.Name) && fn.Name.Name != "TestMain" && !slices.Contains(keep, fn.Name.Name) {
			if fn.Doc != nil {
				dropped[fn.Doc] = true
			}
			for _, c := range f.Comments { // comments inside the body go with it
				if c.Pos() > fn.Pos() && c.End() <= fn.End() {
					dropped[c] = true
				}
			}
			continue
		}
		decls = append(decls, d)
	}
	if len(decls) == len(f.Decls) {
		return false
	}
	f.Decls = decls
	f.Comments = slices.DeleteFunc(f.Comments, func(c *ast.CommentGroup) bool { return dropped[c] })
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	unused := func(spec ast.Spec) bool {
		imp := spec.(*ast.ImportSpec)
		path, _ := strconv.Unquote(imp.Path.Value)
		name := importName(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		return name != "_" && name != "." && !used[name]
	}
	f.Decls = slices.DeleteFunc(f.Decls, func(d ast.Decl) bool {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			return false
		}
		g.Specs = slices.DeleteFunc(g.Specs, unused)
		return len(g.Specs) == 0
	})
	return true
}

// importName guesses the name of the package at path, as the go tool
// names most: the last element, without a major version or a "go-"
// prefix. A wrong guess fails the build, and the whole package is built.
func importName(path string) string {
	elems := strings.Split(path, "/")
	name := elems[len(elems)-1]
	if len(elems) > 1 && majorVersion.MatchString(name) {
		name = elems[len(elems)-2]
	}
	name = strings.TrimPrefix(name, "go-")
	name, _, _ = strings.Cut(name, ".")
	return name
}

var majorVersion = regexp.MustCompile(`^v[0-9]+$`)

// isTestFunc reports whether name is that of a function go test runs.
func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// remove deletes the build's copy of the module, unless other mutants
// share it.
func (b *build) remove() {
	if b.dir != "" && !b.shared {
		_ = os.RemoveAll(b.dir)
	}
}

// try runs the build's tests that match run (-test.run); extra holds
// NAME=value environment entries and -flags for the test binary.
func (b *build) try(run string, extra []string, timeout time.Duration) (verdict, detail string) {
	// The test binary's own timeout panics with every goroutine's stack
	// (a test that hangs on the bug catches it too); the ctx is a backstop.
	// failfast: once one killer failed, the mutant is killed; the others
	// need not run.
	args := []string{"-test.count=1", "-test.failfast", "-test.run", run, "-test.timeout", timeout.String()}
	env := slices.Clone(b.env)
	for _, e := range extra {
		if strings.HasPrefix(e, "-") {
			args = append(args, e)
		} else {
			env = append(env, e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.bin, args...)
	cmd.Dir = b.runDir // where go test runs it: the package's directory
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err == nil && noTests.Match(out):
		return "BROKEN", tail(out) // its killers match no test
	case err == nil:
		return "SURVIVED", tail(out)
	case ctx.Err() != nil:
		return "killed", tail(out) // hung past its own timeout
	case failedTest.Match(out):
		return "killed", string(out)
	default:
		return "BROKEN", tail(out) // no test ran, or the binary failed to start
	}
}

// noTests matches the testing package's report that no test matched its
// -test.run.
var noTests = regexp.MustCompile(`(?m)^testing: warning: no tests to run`)

// violation matches the fault generator's report of a broken property.
var violation = regexp.MustCompile(`property .*: \d+ violations|SAFETY VIOLATION`)

// failedTest matches go test's report of a failed or panicking test, as
// opposed to a build failure.
var failedTest = regexp.MustCompile(`(?m)^(\s*--- FAIL: |panic: )`)

// copyModule copies the files git tracks (and untracked, unignored ones) to
// dir, so that a mutant never touches the working tree.
func copyModule(root, dir string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, f), filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if os.IsNotExist(err) {
		return nil // deleted in the working tree
	}
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
