// Command examplecheck fails when an exported function or method of a
// public package has no example (pkg.go.dev shows examples beside the
// names they are for), and when an example imports an internal package, so
// that a user cannot copy it.
//
//	go run ./internal/examplecheck # from the repository root (make check)
//
// The public packages are every directory of the repository, nested modules
// included, that holds a non-main package outside internal/, cmd/,
// examples/ and bench/. A function F is covered by ExampleF or ExampleF_xxx,
// a method T.M by ExampleT_M or ExampleT_M_xxx, in a _test.go file of the
// same directory. Methods that satisfy a standard interface and have no
// contract of their own (exempt) need none.
//
// The example programs under examples/ are for copying too: none of their
// files may import an internal package.
//
// It prints each name that lacks one as file:line and exits 1 if there is
// any.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// exempt are the methods that implement fmt.Stringer, fmt.Formatter,
// slog.LogValuer, error and errors' Is/As/Unwrap.
var exempt = map[string]bool{
	"String": true, "GoString": true, "Format": true, "LogValue": true,
	"Error": true, "Unwrap": true, "Is": true, "As": true,
}

// skipped are the trees that hold no public package.
var skipped = []string{"internal", "cmd", "examples", "bench", ".git", "testdata"}

func main() {
	problems, err := check(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "examplecheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("examplecheck: %d problems\n", len(problems))
		os.Exit(1)
	}
}

// check returns the problems of every public package under root.
func check(root string) ([]string, error) {
	var problems []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if d.Name() == "examples" {
			ps, err := programImports(p)
			problems = append(problems, ps...)
			if err != nil {
				return err
			}
			return filepath.SkipDir
		}
		if p != root && (slices.Contains(skipped, d.Name()) || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		ps, err := checkDir(p)
		problems = append(problems, ps...)
		return err
	})
	return problems, err
}

// An api name is an exported function, or method of an exported type,
// declared at pos.
type apiName struct {
	name string // F, or T_M
	pos  token.Position
}

// checkDir returns the problems of the package in dir, if it is public.
func checkDir(dir string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []apiName
	examples := map[string]bool{}
	var problems []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			return nil, nil
		}
		if !strings.HasSuffix(e.Name(), "_test.go") {
			names = append(names, declared(fset, f)...)
			continue
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
				examples[strings.TrimPrefix(fd.Name.Name, "Example")] = true
			}
		}
		if hasExample(f) {
			problems = append(problems, internalImports(fset, f)...)
		}
	}
	for _, n := range names {
		if !covered(n.name, examples) {
			problems = append(problems, fmt.Sprintf("%s: %s has no example", n.pos, strings.Replace(n.name, "_", ".", 1)))
		}
	}
	return problems, nil
}

// declared returns f's exported functions and the exported methods of its
// exported types, but the exempt ones.
func declared(fset *token.FileSet, f *ast.File) []apiName {
	var out []apiName
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || !fd.Name.IsExported() {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil {
			recv := receiverType(fd.Recv.List[0].Type)
			if !ast.IsExported(recv) || exempt[name] {
				continue
			}
			name = recv + "_" + name
		}
		out = append(out, apiName{name, fset.Position(fd.Pos())})
	}
	return out
}

// receiverType returns the name of a receiver's type: T of T, *T, T[X].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// covered reports whether an example is for name: Example<name>, or
// Example<name>_suffix with a lower-case suffix.
func covered(name string, examples map[string]bool) bool {
	for ex := range examples {
		if ex == name {
			return true
		}
		if rest, ok := strings.CutPrefix(ex, name+"_"); ok && rest != "" && rest[0] >= 'a' && rest[0] <= 'z' {
			return true
		}
	}
	return false
}

func hasExample(f *ast.File) bool {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Example") {
			return true
		}
	}
	return false
}

// internalImports returns a problem for each internal package a file with
// examples imports.
func internalImports(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal") {
			out = append(out, fmt.Sprintf("%s: an example imports %s, which a user cannot", fset.Position(imp.Pos()), p))
		}
	}
	return out
}

// programImports returns a problem for each internal package a file of the
// example programs under dir imports.
func programImports(dir string) ([]string, error) {
	var problems []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		problems = append(problems, internalImports(fset, f)...)
		return nil
	})
	return problems, err
}
