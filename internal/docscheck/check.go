// The checks: a doc's text, code spans, Go comments and Lua comments, each
// name held against the index.

package main

import (
	"go/scanner"
	"go/token"
	"path"
	"slices"
	"strings"
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
// and Err… names (but for the peers' in externalNames).
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
		if !idx.decls[m[1]] && !externalNames[m[1]] {
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
