// Command mutants proves that redlock's tests can fail: it applies
// deliberate bugs to a copy of the module, one at a time, and runs the tests
// that must catch each. It exits non-zero if any mutant survives (its tests
// still pass), or no longer applies (the code it targets changed: update the
// table), so a test that stopped testing anything is noticed.
//
//	go run ./internal/mutants            # every mutant (make mutants)
//	go run ./internal/mutants -run drift # those whose name contains "drift"
//	go run ./internal/mutants -generator 8000  # also the fault generator on each
//
// With -generator N, each mutant also meets N calls of the whole-API fault
// generator (TestChaos/20), which knows nothing of the bug: the report says
// whether it caught it too. Only the named tests decide the exit status.
//
// Each mutant is a literal replacement that must match exactly once. Most
// share one build, in which the environment chooses the mutant at run time
// (schemata.go); -alone builds each by itself, as the others always are:
// a copy that keeps only the tests that run (most of a build is the
// tests), built a few ahead while the tests run.
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A mutant is one deliberate bug and the tests that must catch it.
type mutant struct {
	name     string
	file     string // relative to the module root
	from, to string // from must occur exactly once in file
	killers  string // go test -run pattern; with a slash, a subtest's pattern as go test takes it
	pkg      string // the directory of the package whose tests are the killers, relative to the module root; "": enginePkg
}

// enginePkg is the package whose tests are most mutants' killers: the
// lock logic's (internal/engine).
const enginePkg = "internal/engine"

// testDir is the directory of the package whose tests are m's killers.
func (m mutant) testDir() string {
	if m.pkg == "" {
		return enginePkg
	}
	return m.pkg
}

// mutants is the table, in the order the mutants run: its parts are
// table1.go to table4.go.
var mutants = slices.Concat(table1, table2, table3, table4)

// options are the command's flags.
type options struct {
	run              string
	timeout          time.Duration
	generator        int
	seed             string
	alone, baseline  bool
	parallel         int
	check, buildOnly bool
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.run, "run", "", "only the mutants whose name contains this")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "for one mutant's tests")
	flag.IntVar(&o.generator, "generator", 0, "also run this many calls of the fault generator on each mutant")
	flag.StringVar(&o.seed, "seed", "", "REDLOCK_CHAOS_SEED for the generator (default: random)")
	flag.BoolVar(&o.alone, "alone", false, "build every mutant alone, none in the shared build")
	flag.BoolVar(&o.baseline, "baseline", false, "first run the shared build's killers with no mutant chosen: all must pass")
	flag.IntVar(&o.parallel, "parallel", 2, "run this many mutants' tests side by side (they mostly wait on the masters)")
	flag.BoolVar(&o.check, "check", false, "only check that every mutant applies (its from occurs once in its file); run no test")
	flag.BoolVar(&o.buildOnly, "build", false, "only build the shared build of the chosen mutants (schemata.go), and say whether it builds; run no test")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	if o.check {
		os.Exit(checkApply(root))
	}
	var chosen []mutant
	for _, m := range mutants {
		if strings.Contains(m.name, o.run) {
			chosen = append(chosen, m)
		}
	}
	// Most mutants share one build (schemata.go); the others build alone,
	// a few ahead, while the tests run: builds take most of the CPU and
	// tests mostly wait on the masters.
	var in map[int]bool
	var shared *build
	if !o.alone {
		shared, in = buildShared(root, chosen, o.timeout)
	}
	if o.buildOnly {
		os.Exit(reportShared(shared, chosen, in))
	}
	if o.baseline && shared != nil && !runBaseline(shared, chosen, in, o.timeout) {
		os.Exit(1)
	}
	t := &tally{}
	t.runAll(schedule(root, chosen, in, shared, o), o)
	os.Exit(t.report(shared, in))
}

// reportShared says whether the shared build built, and names the mutants
// left out of it; it returns the exit status.
func reportShared(shared *build, chosen []mutant, in map[int]bool) int {
	if shared == nil {
		return 1
	}
	fmt.Printf("the shared build holds %d of %d mutants, and builds (%.0fs); the others build alone:\n", len(in), len(chosen), shared.took.Seconds())
	for i, m := range chosen {
		if !in[i] {
			fmt.Printf("  %s (%s)\n", m.name, m.file)
		}
	}
	shared.shared = false
	shared.remove()
	return 0
}

// runBaseline runs the shared build's killers with no mutant chosen, and
// reports whether they all passed: a test that fails without a mutant
// makes a kill prove nothing.
func runBaseline(shared *build, chosen []mutant, in map[int]bool, timeout time.Duration) bool {
	start := time.Now()
	run := baselineRun(chosen, in)
	verdict, detail := shared.try(run, nil, 4*timeout) // more than a hundred tests
	status := "passed"
	if verdict != "SURVIVED" { // what a mutant's passing tests are called
		status = "FAILED"
	}
	fmt.Printf("%-36s %-8s %6.1fs  the shared build's killers, no mutant chosen\n", "baseline", status, time.Since(start).Seconds())
	if status == "FAILED" {
		fmt.Println(indent(detail))
		shared.shared = false
		shared.remove()
		return false
	}
	return true
}

// schedule returns the builds to run, in the table's order but for the
// builds made alone, which go to the tests as soon as they are ready,
// between the shared build's mutants, so that the builds never fall
// behind.
func schedule(root string, chosen []mutant, in map[int]bool, shared *build, o options) <-chan *build {
	built := make(chan *build)
	ahead := make(chan *build, 4)
	go func() {
		defer close(ahead)
		for i, m := range chosen {
			if !in[i] {
				ahead <- prepare(root, m, o.timeout, o.generator > 0)
			}
		}
	}()
	go func() {
		defer close(built)
		var pending <-chan *build = ahead
		for i := 0; ; {
			for i < len(chosen) && !in[i] {
				i++
			}
			if i == len(chosen) {
				break
			}
			select {
			case b, ok := <-pending:
				if !ok {
					pending = nil // closed: a nil channel is never ready
					continue
				}
				built <- b
			default:
				b := *shared
				b.m, b.env = chosen[i], []string{schemataEnv + "=" + strconv.Itoa(i)}
				built <- &b
				i++
			}
		}
		if pending != nil {
			for b := range pending {
				built <- b
			}
		}
	}()
	return built
}

// A tally is what the mutants' runs came to.
type tally struct {
	mu                    sync.Mutex // all below, and the output
	survived, broken, ran int
	failed                []string // named again at the end, where a CI log's tail shows them
	flaky                 []string // killed only on a second run: their killers need work
	buildTime, waited     time.Duration
}

// runAll runs the builds' tests, o.parallel side by side.
func (t *tally) runAll(built <-chan *build, o options) {
	var wg sync.WaitGroup
	for range max(o.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				wait := time.Now()
				b, ok := <-built
				if !ok {
					return
				}
				var out strings.Builder
				verdict, detail, flakily := b.run(&out, o.timeout, o.generator, o.seed)
				b.remove()
				t.record(b, time.Since(wait), out.String(), verdict, detail, flakily)
			}
		}()
	}
	wg.Wait()
}

// record counts one mutant's verdict, and prints its output.
func (t *tally) record(b *build, since time.Duration, out, verdict, detail string, flakily bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waited += since - b.ran
	if !b.shared {
		t.buildTime += b.took
	}
	t.ran++
	fmt.Print(out)
	if flakily {
		t.flaky = append(t.flaky, b.m.name)
	}
	switch verdict {
	case "killed", "killed*":
	case "SURVIVED":
		t.survived++
		t.failed = append(t.failed, b.m.name+" survived")
		fmt.Println(indent(detail))
	default:
		t.broken++
		t.failed = append(t.failed, b.m.name+" "+verdict)
		fmt.Println(indent(detail))
	}
}

// report prints the summary and returns the exit status.
func (t *tally) report(shared *build, in map[int]bool) int {
	fmt.Printf("%d mutants: %d killed, %d survived, %d did not apply or build\n", t.ran, t.ran-t.survived-t.broken, t.survived, t.broken)
	if shared != nil {
		fmt.Printf("%d of them in one build, %.0fs\n", len(in), shared.took.Seconds())
		shared.shared = false
		shared.remove()
	}
	fmt.Printf("builds alone took %.0fs in all, %.0fs of which the tests waited for\n", t.buildTime.Seconds(), t.waited.Seconds())
	for _, f := range t.failed {
		fmt.Println("  " + f)
	}
	for _, f := range t.flaky {
		fmt.Println("  " + f + " killed only on a second run: make its killers fail every time")
	}
	if t.ran == 0 || t.survived > 0 || t.broken > 0 {
		return 1
	}
	return 0
}

// baselineRun is a -test.run pattern for the top-level tests that kill
// the mutants of chosen in the shared build (in), but the fault suite's
// (TestChaos: its scenarios run in the race run), as killerNames finds
// them.
func baselineRun(chosen []mutant, in map[int]bool) string {
	names := map[string]bool{}
	for i, m := range chosen {
		if !in[i] {
			continue
		}
		for _, name := range killerNames(m.killers) {
			if name != "TestChaos" {
				names[name] = true
			}
		}
	}
	return "^(" + strings.Join(slices.Sorted(maps.Keys(names)), "|") + ")$"
}

// run runs b's killers, and the fault generator's calls when generator is
// set, and writes its report to out: the verdict and its detail, and
// whether the mutant was killed only by a second run.
func (b *build) run(out io.Writer, timeout time.Duration, generator int, seed string) (verdict, detail string, flakily bool) {
	start := time.Now()
	defer func() { b.ran = time.Since(start) }()
	m := b.m
	pattern := "^(" + m.killers + ")$"
	if strings.Contains(m.killers, "/") {
		pattern = m.killers // a subtest: the testing package splits the pattern at each slash
	}
	verdict, detail = b.verdict, b.detail
	if verdict == "" {
		verdict, detail = b.try(pattern, nil, timeout)
	}
	if verdict == "SURVIVED" {
		// Once more: a killer that depends on the order of the masters'
		// replies may pass by chance. A mutant killed only then is named
		// as such, so the weak test shows.
		if again, _ := b.try(pattern, nil, timeout); again == "killed" {
			verdict, flakily = "killed*", true
		}
	}
	// The time of its tests: its build overlapped other mutants' tests.
	fmt.Fprintf(out, "%-36s %-8s %6.1fs  %s\n", m.name, verdict, time.Since(start).Seconds(), m.killers)
	if b.note != "" {
		fmt.Fprintln(out, indent(b.note))
	}
	if generator > 0 && b.verdict == "" {
		start := time.Now()
		env := []string{"REDLOCK_CHAOS_SEED=" + seed}
		if seed == "" {
			env = nil
		}
		g, gout := b.try("^TestChaos$/^20_", append(env, fmt.Sprintf("-chaos.ops=%d", generator)), timeout)
		if g == "killed" && !violation.MatchString(gout) {
			g = "FAILED" // for another reason than a property: see its output
			fmt.Fprintln(out, indent(gout))
		}
		fmt.Fprintf(out, "%-36s %-8s %6.1fs  the fault generator, %d calls\n", "", g, time.Since(start).Seconds(), generator)
	}
	return verdict, detail, flakily
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a module")
	}
	return filepath.Dir(mod), nil
}

func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

func firstLine(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}

// checkApply reports each mutant whose from does not occur exactly once in
// its file, and returns the exit status: 1 if any.
func checkApply(root string) int {
	status := 0
	for _, m := range mutants {
		src, err := os.ReadFile(filepath.Join(root, m.file))
		if err != nil {
			fmt.Printf("%-36s %v\n", m.name, err)
			status = 1
			continue
		}
		if n := strings.Count(string(src), m.from); n != 1 {
			fmt.Printf("%-36s %s: from occurs %d times\n", m.name, m.file, n)
			status = 1
		}
	}
	fmt.Printf("%d mutants checked\n", len(mutants))
	return status
}
