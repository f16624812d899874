package main

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSchemataChoosesTheMutantAtRunTime puts mutants of every kind of
// function the transform must handle into one package, and runs it with
// each chosen: each changes what its function returns, and only when
// chosen; one outside any function is left to be built alone.
func TestSchemataChoosesTheMutantAtRunTime(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.24\n")
	write("m.go", `package m

type T struct{ n int }

const outside = 1

func (t *T) method(a, _ int, s ...string) int { return t.n + a + len(s) }

func (*T) unnamed(int, string) int { return 1 }

func generic[E any](xs []E) int { return len(xs) }

func noResult(p *int) { *p = 1 }
`)
	write("m_test.go", `package m

import (
	"os"
	"strconv"
	"testing"
)

func TestReport(t *testing.T) {
	var p int
	noResult(&p)
	got := []int{(&T{n: 1}).method(1, 9, "a", "b"), (&T{}).unnamed(0, ""), generic([]string{"x"}), p}
	var out string
	for _, v := range got {
		out += strconv.Itoa(v) + " "
	}
	if err := os.WriteFile(os.Getenv("OUT"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
`)
	for _, git := range [][]string{{"init", "-q"}, {"add", "."}} {
		cmd := exec.Command("git", git...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("git %v: %v: %s", git, err, out)
		}
	}
	ms := []mutant{
		{file: "m.go", from: "t.n + a + len(s)", to: "t.n + a + len(s) + 100"},
		{file: "m.go", from: "{ return 1 }", to: "{ return 2 }"},
		{file: "m.go", from: "return len(xs)", to: "return len(xs) + 10"},
		{file: "m.go", from: "*p = 1", to: "*p = 7"},
		{file: "m.go", from: "outside = 1", to: "outside = 2"},
	}
	copyDir, in, err := schemata(dir, ms)
	defer os.RemoveAll(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 4 || in[4] {
		t.Fatalf("in the shared build: %v, want the four mutants inside functions", in)
	}
	src, err := os.ReadFile(filepath.Join(copyDir, "m.go"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := format.Source(src); err != nil {
		t.Fatalf("the schemata's m.go does not parse: %v\n%s", err, src)
	}
	bin, out, err := buildSchemata(copyDir, ".", 5*time.Minute)
	if err != nil {
		t.Fatalf("build: %v\n%s\n%s", err, out, src)
	}
	for chosen, want := range map[string]string{
		"":  "4 1 1 1 ",
		"0": "104 1 1 1 ",
		"1": "4 2 1 1 ",
		"2": "4 1 11 1 ",
		"3": "4 1 1 7 ",
		"4": "4 1 1 1 ", // not in the build: no change
	} {
		outFile := filepath.Join(t.TempDir(), "out")
		cmd := exec.Command(bin, "-test.run", "TestReport")
		cmd.Env = append(os.Environ(), schemataEnv+"="+chosen, "OUT="+outFile)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s=%s: %v\n%s", schemataEnv, chosen, err, out)
		}
		got, err := os.ReadFile(outFile)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s=%q: %q, want %q\n%s", schemataEnv, chosen, got, want, strings.TrimSpace(string(src)))
		}
	}
}
