// The index: what exists in the repository, for the docs to be checked
// against: tests, files, and the declarations of each package.

package main

import (
	"go/ast"
	"go/token"
)

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
	a := adder{idx: idx, pkg: f.Name.Name, root: inRoot && f.Name.Name == "redlock"}
	a.decls, a.members = idx.others, idx.others
	if a.root {
		a.decls, a.members = idx.decls, idx.members
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				if d.Name.IsExported() {
					a.decls[d.Name.Name] = true
				}
				continue
			}
			a.member(receiverType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				a.spec(s)
			}
		}
	}
	return a.root
}

// An adder adds one file's declarations to the index: the root package's
// to its own names, the others' to idx.others.
type adder struct {
	idx            *index
	pkg            string
	root           bool
	decls, members map[string]bool
}

// member adds typ's exported method or field name.
func (a adder) member(typ, name string) {
	if !ast.IsExported(name) {
		return
	}
	if a.pkg == "engine" {
		if a.idx.engine[typ] == nil {
			a.idx.engine[typ] = map[string]bool{}
		}
		a.idx.engine[typ][name] = true
	}
	a.members[name] = true
	if a.root && ast.IsExported(typ) {
		if a.idx.types[typ] == nil {
			a.idx.types[typ] = map[string]bool{}
		}
		a.idx.types[typ][name] = true
	}
}

// spec adds a const, var or type declaration: a type's fields too, and a
// root alias of an engine type.
func (a adder) spec(s ast.Spec) {
	switch s := s.(type) {
	case *ast.ValueSpec:
		for _, n := range s.Names {
			if n.IsExported() {
				a.decls[n.Name] = true
			}
		}
	case *ast.TypeSpec:
		if s.Name.IsExported() {
			a.decls[s.Name.Name] = true
			if a.root && a.idx.types[s.Name.Name] == nil {
				a.idx.types[s.Name.Name] = map[string]bool{}
			}
			if sel, ok := s.Type.(*ast.SelectorExpr); a.root && s.Assign.IsValid() && ok {
				a.idx.aliases[s.Name.Name] = sel.Sel.Name
			}
		}
		for _, m := range fieldNames(s.Type) {
			a.member(s.Name.Name, m)
		}
	}
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
