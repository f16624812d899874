package main

// Mutant schemata: most mutants go into one build, chosen at run time.
//
// Building a test binary per mutant takes about 2.6 s on two cores, and
// there are more than a hundred: the builds, not the tests, set the pace.
// So each mutant whose code lies inside one top-level function of a Go
// file is compiled into a single copy of the module: its function is
// copied, with the bug, under a new name, and the original function
// starts by calling that copy when the environment names the mutant:
//
//	func (c *Client) unlock(ctx context.Context, l *Lock) error {
//		if zzMutant == 17 {
//			return c.unlock__mutant17(ctx, l)
//		}
//		…
//
// With no mutant named, the build is the library with one comparison at
// the top of some functions. The others (a Lua script's, a declaration's,
// one that spans functions) are built alone, as before, while the
// schemata's tests run.

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// schemataEnv names the environment variable that chooses the mutant.
const schemataEnv = "REDLOCK_MUTANT"

// An edit replaces src[at:at+n] with text.
type edit struct {
	at, n int
	text  string
}

// schemata copies the module to a new directory and puts into it every
// mutant of ms it can (see above), keyed by its index in ms. It returns
// the copy's directory (the caller removes it) and the mutants it holds;
// the others are left to be built alone.
func schemata(root string, ms []mutant) (dir string, in map[int]bool, err error) {
	dir, err = os.MkdirTemp("", "redlock-schemata-")
	if err != nil {
		return "", nil, err
	}
	if err := copyModule(root, dir); err != nil {
		return dir, nil, err
	}
	byFile := map[string][]int{}
	for i, m := range ms {
		if m.pkg == "" && strings.HasSuffix(m.file, ".go") && !strings.HasSuffix(m.file, "_test.go") {
			byFile[m.file] = append(byFile[m.file], i)
		}
	}
	in = map[int]bool{}
	pkgs := map[string]string{} // directory → package name, of the files with copies
	for file, idx := range byFile {
		pkg, err := schemataFile(filepath.Join(dir, file), ms, idx, in)
		if err != nil {
			return dir, nil, err
		}
		if pkg != "" {
			pkgs[filepath.Dir(file)] = pkg
		}
	}
	for d, pkg := range pkgs {
		if err := os.WriteFile(filepath.Join(dir, d, "zz_mutant_schemata.go"), []byte(chooser(pkg)), 0o644); err != nil {
			return dir, nil, err
		}
	}
	return dir, in, nil
}

// schemataFile rewrites the file at path for the mutants ms[idx] of it:
// each mutated function gets a copy with the mutant, and a dispatch to it
// at its start. It records in in the mutants it holds, and returns the
// file's package name; "" when it holds none.
func schemataFile(path string, ms []mutant, idx []int, in map[int]bool) (pkg string, err error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return "", err
	}
	var edits []edit
	var copies []string
	type names struct {
		recv string
		args []string
	}
	named := map[*ast.FuncDecl]names{} // whose unnamed parameters were named
	for _, i := range idx {
		m := ms[i]
		if bytes.Count(src, []byte(m.from)) != 1 {
			continue // STALE: built alone, which says so
		}
		at := bytes.Index(src, []byte(m.from))
		fn := enclosingFunc(fset, f, at, at+len(m.from))
		if fn == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()).Offset, fset.Position(fn.End()).Offset
		name := fmt.Sprintf("%s__mutant%d", fn.Name.Name, i)
		nameAt := fset.Position(fn.Name.Pos()).Offset
		copies = append(copies, apply(string(src[start:end]), []edit{
			{at: at - start, n: len(m.from), text: m.to},
			{at: nameAt - start, n: len(fn.Name.Name), text: name},
		}))
		ns, ok := named[fn]
		if !ok {
			var e []edit
			e, ns.recv, ns.args = params(fset, fn)
			edits = append(edits, e...)
			named[fn] = ns
		}
		edits = append(edits, edit{
			at:   fset.Position(fn.Body.Lbrace).Offset + 1,
			text: dispatch(fn, i, name, ns.recv, ns.args),
		})
		in[i] = true
	}
	if len(copies) == 0 {
		return "", nil
	}
	out := apply(string(src), edits) + "\n" + strings.Join(copies, "\n\n") + "\n"
	return f.Name.Name, os.WriteFile(path, []byte(out), 0o644)
}

// chooser is the file that declares, in package pkg, the mutant the
// environment chose: each package with mutants in the shared build has one.
func chooser(pkg string) string {
	return fmt.Sprintf(`package %s

import (
	"os"
	"strconv"
)

// zzMutant is the mutant the environment chose (%s), or -1.
var zzMutant = func() int {
	n, err := strconv.Atoi(os.Getenv(%q))
	if err != nil {
		return -1
	}
	return n
}()
`, pkg, schemataEnv, schemataEnv)
}

// enclosingFunc returns f's top-level function whose body holds
// src[from:to], or nil: then the mutant is built alone. An init function
// cannot be called, and a function without a body has no code to copy.
func enclosingFunc(fset *token.FileSet, f *ast.File, from, to int) *ast.FuncDecl {
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || fn.Name.Name == "init" {
			continue
		}
		lb, rb := fset.Position(fn.Body.Lbrace).Offset, fset.Position(fn.Body.Rbrace).Offset
		if lb <= from && to <= rb+1 {
			return fn
		}
	}
	return nil
}

// params names fn's receiver and parameters that have no name, or the
// blank one, so that the dispatch can pass them on. It returns the edits
// that name them, and the names of the receiver ("" for a function) and
// of the parameters, as the dispatch passes them (a variadic one with
// "...").
func params(fset *token.FileSet, fn *ast.FuncDecl) (edits []edit, recv string, args []string) {
	n := 0
	name := func(id *ast.Ident, typ ast.Expr) string {
		n++
		switch {
		case id == nil:
			edits = append(edits, edit{at: fset.Position(typ.Pos()).Offset, text: fmt.Sprintf("zzp%d ", n)})
		case id.Name == "_":
			edits = append(edits, edit{at: fset.Position(id.Pos()).Offset, n: 1, text: fmt.Sprintf("zzp%d", n)})
		default:
			return id.Name
		}
		return fmt.Sprintf("zzp%d", n)
	}
	if fn.Recv != nil {
		field := fn.Recv.List[0]
		var id *ast.Ident
		if len(field.Names) > 0 {
			id = field.Names[0]
		}
		recv = name(id, field.Type)
	}
	for _, field := range fn.Type.Params.List {
		suffix := ""
		if _, variadic := field.Type.(*ast.Ellipsis); variadic {
			suffix = "..."
		}
		if len(field.Names) == 0 {
			args = append(args, name(nil, field.Type)+suffix)
		}
		for _, id := range field.Names {
			args = append(args, name(id, field.Type)+suffix)
		}
	}
	return edits, recv, args
}

// dispatch is the statement that starts fn: when mutant i is chosen, the
// call of its copy, name, on recv with fn's type parameters and args (as
// params named them).
func dispatch(fn *ast.FuncDecl, i int, name, recv string, args []string) string {
	call := name
	if recv != "" {
		call = recv + "." + name
	}
	if tp := fn.Type.TypeParams; tp != nil && len(tp.List) > 0 {
		var ts []string
		for _, field := range tp.List {
			for _, id := range field.Names {
				ts = append(ts, id.Name)
			}
		}
		call += "[" + strings.Join(ts, ", ") + "]"
	}
	call += "(" + strings.Join(args, ", ") + ")"
	if fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
		return fmt.Sprintf("\n\tif zzMutant == %d {\n\t\treturn %s\n\t}\n", i, call)
	}
	return fmt.Sprintf("\n\tif zzMutant == %d {\n\t\t%s\n\t\treturn\n\t}\n", i, call)
}

// apply makes edits to src: none may overlap another; insertions at one
// offset keep their order.
func apply(src string, edits []edit) string {
	sort.SliceStable(edits, func(a, b int) bool { return edits[a].at < edits[b].at })
	var out strings.Builder
	last := 0
	for _, e := range edits {
		out.WriteString(src[last:e.at])
		out.WriteString(e.text)
		last = e.at + e.n
	}
	out.WriteString(src[last:])
	return out.String()
}

// buildSchemata compiles the test binary of the package in dir/pkg, of the
// schemata's copy of the module in dir.
func buildSchemata(dir, pkg string, timeout time.Duration) (bin string, out []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	bin = filepath.Join(dir, "schemata.test")
	out, err = compileTests(ctx, filepath.Join(dir, pkg), bin)
	return bin, out, err
}
