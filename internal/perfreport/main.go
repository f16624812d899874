// Command perfreport reads the output of scripts/perf.sh's benchmark runs,
// one file per run, and prints the performance goals' table
// (docs/performance.md): each row's figure in every run, as a ratio
// computed within that run, their median, and whether the goal holds in
// the median.
//
//	go run ./internal/perfreport run1.txt run2.txt run3.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// A run is one run's metrics: benchmark name (without the -N suffix) →
// unit → value.
type run map[string]map[string]float64

// A row is one goal: how to compute its figure from a run, and the bound.
type row struct {
	name   string
	goal   string
	figure func(r run) (float64, bool)
	holds  func(v float64) bool
	format string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: perfreport run1.txt [run2.txt …]")
		os.Exit(2)
	}
	var runs []run
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		r, err := parse(f)
		_ = f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, path+":", err)
			os.Exit(1)
		}
		runs = append(runs, r)
	}
	write(os.Stdout, runs)
}

// parse reads go test -bench output.
func parse(in io.Reader) (run, error) {
	r := run{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	pending := "" // a benchmark's name whose figures a log line pushed to a later line
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && strings.HasPrefix(f[0], "Benchmark") && (len(f) < 2 || !isNumber(f[1])) {
			pending = f[0]
			continue
		}
		if pending != "" && len(f) >= 3 && isNumber(f[0]) {
			f = append([]string{pending}, f...)
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		pending = ""
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := r[name]
		if m == nil {
			m = map[string]float64{}
			r[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			m[f[i+1]] = v
		}
	}
	return r, sc.Err()
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func (r run) get(bench, unit string) (float64, bool) {
	v, ok := r[bench][unit]
	return v, ok && v != 0
}

// ratio is a/b of two metrics of the run.
func ratio(benchA, unitA, benchB, unitB string) func(run) (float64, bool) {
	return func(r run) (float64, bool) {
		a, ok1 := r.get(benchA, unitA)
		b, ok2 := r.get(benchB, unitB)
		return a / b, ok1 && ok2
	}
}

func metric(bench, unit string) func(run) (float64, bool) {
	return func(r run) (float64, bool) { return r.get(bench, unit) }
}

// perThousand is a metric in thousands of its unit (µs as ms).
func perThousand(bench, unit string) func(run) (float64, bool) {
	return func(r run) (float64, bool) { v, ok := r.get(bench, unit); return v / 1000, ok }
}

func atLeast(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
func atMost(x float64) func(float64) bool  { return func(v float64) bool { return v <= x } }

const (
	par   = "BenchmarkParallel/"
	unc   = "BenchmarkUncontended/"
	procs = "BenchmarkContendedProcesses/"
	cpu   = "BenchmarkServerCPU"
	tails = "BenchmarkTails"
)

var rows = []row{
	{"64 goroutines, distinct keys: pairs/s × bsm/redislock on one master", "≥ 0.65×",
		ratio(par+"bsm-1-node", "ns/op", par+"redlock", "ns/op"), atLeast(0.65), "%.3f×"},
	{"uncontended pair p50 × the bare floor (restart guard on)", "≤ 1.10×",
		ratio(unc+"redlock", "p50-µs", unc+"floor", "p50-µs"), atMost(1.10), "%.2f×"},
	{"8 processes on one key: acquisitions/s × the pub/sub oracle", "≥ 0.97×",
		ratio(procs+"oracle-pubsub", "ns/op", procs+"redlock", "ns/op"), atLeast(0.97), "%.2f×"},
	{"8 processes on one key: acquisitions/s × redsync", "≥ 1.1×",
		ratio(procs+"redsync", "ns/op", procs+"redlock", "ns/op"), atLeast(1.1), "%.2f×"},
	{"8 processes: wait p99", "≤ 20 ms",
		metric(procs+"redlock", "p99-wait-ms"), atMost(20), "%.1f ms"},
	{"8 processes: server commands per acquisition × redsync's", "≤ 1×",
		ratio(procs+"redlock", "srv-cmds/acq", procs+"redsync", "srv-cmds/acq"), atMost(1), "%.2f×"},
	{"a master's CPU per pair × the floor's commands, 25 pairs a pipeline", "≤ 1.4×",
		metric(cpu, "redlock/floor"), atMost(1.4), "%.2f×"},
	{"slow master (+50 ms): lock p99 × healthy", "≤ 1.3×",
		metric(tails, "slow/healthy-lock-p99"), atMost(1.3), "%.2f×"},
	{"dead master: lock p99 × healthy", "≤ 1.5×",
		metric(tails, "dead/healthy-lock-p99"), atMost(1.5), "%.2f×"},
	{"dead master: unlock p99", "≤ 2 ms",
		perThousand(tails, "dead-unlock-p99-µs"),
		atMost(2), "%.2f ms"},
	{"allocations per uncontended pair", "≤ 100",
		metric(unc+"redlock", "allocs/op"), atMost(100), "%.0f"},
}

// bounds are the same runs' figures that bound the rows above: what the
// least that work costs reaches, measured beside it.
var bounds = []row{
	{"uncontended pair p50: the floor running our scripts × the floor", "",
		ratio(unc+"floor-scripts", "p50-µs", unc+"floor", "p50-µs"), nil, "%.2f×"},
	{"8 processes: the pub/sub oracle × bsm/redislock (acquisitions/s)", "",
		ratio(procs+"bsm-1-node", "ns/op", procs+"oracle-pubsub", "ns/op"), nil, "%.2f×"},
	{"8 processes: the pub/sub oracle's wait p99", "",
		metric(procs+"oracle-pubsub", "p99-wait-ms"), nil, "%.1f ms"},
	{"8 processes: the line oracle (each want announced and withdrawn through the masters) × the pub/sub oracle", "",
		ratio(procs+"oracle-pubsub", "ns/op", procs+"oracle-pubsub-line", "ns/op"), nil, "%.2f×"},
	{"8 processes: redlock × the line oracle (acquisitions/s)", "",
		ratio(procs+"oracle-pubsub-line", "ns/op", procs+"redlock", "ns/op"), nil, "%.2f×"},
	{"8 processes: the line oracle × redsync (acquisitions/s)", "",
		ratio(procs+"redsync", "ns/op", procs+"oracle-pubsub-line", "ns/op"), nil, "%.2f×"},
	{"8 processes: the line oracle's wait p99", "",
		metric(procs+"oracle-pubsub-line", "p99-wait-ms"), nil, "%.1f ms"},
	{"8 processes: the workers' CPU per acquisition, redlock", "",
		perThousand(procs+"redlock", "cli-cpu-µs/acq"), nil, "%.2f ms"},
	{"8 processes: the workers' CPU per acquisition, the line oracle", "",
		perThousand(procs+"oracle-pubsub-line", "cli-cpu-µs/acq"), nil, "%.2f ms"},
	{"8 processes: the masters' CPU per acquisition, redlock", "",
		perThousand(procs+"redlock", "srv-cpu-µs/acq"), nil, "%.2f ms"},
	{"8 processes: the masters' CPU per acquisition, the line oracle", "",
		perThousand(procs+"oracle-pubsub-line", "srv-cpu-µs/acq"), nil, "%.2f ms"},
	{"8 processes: the workers' reads and writes per acquisition, redlock", "",
		metric(procs+"redlock", "cli-rw-calls/acq"), nil, "%.0f"},
	{"8 processes: the workers' reads and writes per acquisition, the line oracle", "",
		metric(procs+"oracle-pubsub-line", "cli-rw-calls/acq"), nil, "%.0f"},
	{"8 processes: masters holding the holder's key, redlock", "",
		metric(procs+"redlock", "holding-masters"), nil, "%.1f"},
	{"8 processes: masters holding the holder's key, the pub/sub oracle", "",
		metric(procs+"oracle-pubsub", "holding-masters"), nil, "%.1f"},
	{"a master's CPU per pair: the floor plus the marker's GET × the floor", "",
		metric(cpu, "floor-guarded/floor"), nil, "%.2f×"},
	{"a master's CPU per pair: our acquire and release scripts × the floor", "",
		metric(cpu, "redlock-scripts/floor"), nil, "%.2f×"},
	{"allocations per uncontended pair: the floor's (go-redis, 10 commands)", "",
		metric(unc+"floor", "allocs/op"), nil, "%.0f"},
	{"64 goroutines: the floor × bsm/redislock", "",
		ratio(par+"bsm-1-node", "ns/op", par+"floor", "ns/op"), nil, "%.2f×"},
	{"64 goroutines: redsync × bsm/redislock", "",
		ratio(par+"bsm-1-node", "ns/op", par+"redsync", "ns/op"), nil, "%.2f×"},
	{"64 goroutines: server commands per pair, redlock", "",
		metric(par+"redlock", "srv-cmds/op"), nil, "%.1f"},
	{"healthy: lock p99", "", metric(tails, "healthy-lock-p99-µs"), nil, "%.0f µs"},
	{"hung master (black hole): lock p99 × healthy", "", metric(tails, "hung/healthy-lock-p99"), nil, "%.2f×"},
	{"hung master: unlock p99", "",
		perThousand(tails, "hung-unlock-p99-µs"),
		nil, "%.2f ms"},
}

func write(w io.Writer, runs []run) {
	fmt.Fprintln(w, "| row | goal | runs | median | holds |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- |")
	for _, rw := range rows {
		vals, cells := rw.figures(runs)
		med, holds := "—", "—"
		if len(vals) > 0 {
			m := median(vals)
			med = fmt.Sprintf(rw.format, m)
			holds = "no"
			if rw.holds(m) {
				holds = "**yes**"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", rw.name, rw.goal, strings.Join(cells, ", "), med, holds)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| bound, same runs | runs | median |")
	fmt.Fprintln(w, "| --- | --- | --- |")
	for _, rw := range bounds {
		vals, cells := rw.figures(runs)
		med := "—"
		if len(vals) > 0 {
			med = fmt.Sprintf(rw.format, median(vals))
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", rw.name, strings.Join(cells, ", "), med)
	}
}

// figures returns rw's figure in each run that has it, and a cell per run,
// "—" where it has none.
func (rw row) figures(runs []run) (vals []float64, cells []string) {
	for _, r := range runs {
		v, ok := rw.figure(r)
		if !ok {
			cells = append(cells, "—")
			continue
		}
		vals = append(vals, v)
		cells = append(cells, fmt.Sprintf(rw.format, v))
	}
	return vals, cells
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
