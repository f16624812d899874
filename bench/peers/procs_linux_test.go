package peers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
)

// BenchmarkContendedProcesses is BenchmarkContended with each of the 8
// lockers in a process of its own, as issue 13's row "8 Clients contending"
// means: this test binary run again as TestContendedWorker, told the
// masters' addresses. No locker then shares a Go runtime with another:
// one's notices, replies and timers do not wake another's holder late (see
// BenchmarkContended on time.Sleep), nor queue with another's on the two
// processors of one runtime. The workers share, through a file mapped into
// each, the count of acquisitions and the moment of the last release call
// (wall clock, one machine), and each reports its waits and turns once the
// count is reached, before it closes its locker. The oracle, whose turns
// pass through a channel in one process, does not take part; the pub/sub
// oracle (oracle_linux_test.go), the least a turn heard from the masters
// can cost, does, and so does the pub/sub line oracle, which also keeps
// its line of waiters through the masters, as redlock does. Run it with
// -benchtime Nx (every run starts 8 processes):
//
//	cd bench/peers && go test -run '^$' -bench ContendedProcesses -benchtime 3000x .
//
// Besides the waits and turns it reports, per acquisition, the workers'
// CPU and read and write system calls and the masters' CPU, and how many
// masters held the holder's key on average (sampleWidth). With
// PEERS_PROFILE set to a directory, each worker writes its CPU profile
// there.
func BenchmarkContendedProcesses(b *testing.B) {
	checkHoldFlag(b)
	for _, im := range procImpls {
		if im.make == nil || strings.HasPrefix(im.name, "floor") {
			continue // the oracle needs one process; the floors do not wait
		}
		b.Run(im.name, func(b *testing.B) {
			servers := masters(b)[:im.nodes]
			addrs := make([]string, len(servers))
			for i, s := range servers {
				addrs[i] = s.Addr
			}
			shm := newShared(b)
			shm.word(sharedTarget).Store(int64(b.N))
			const workers = 8
			procs := make([]*workerProc, workers)
			for i := range procs {
				procs[i] = startWorker(b, im.name, addrs, shm.path)
			}
			for _, p := range procs {
				p.await("ready")
			}
			srv := serverCommands(b, servers)
			cpu := serversCPU(b, servers)
			width := sampleWidth(servers, "contended")
			b.ResetTimer()
			for _, p := range procs {
				p.send("go")
			}
			var all workerReport
			for _, p := range procs {
				r := p.report()
				all.Waits = append(all.Waits, r.Waits...)
				all.Turns = append(all.Turns, r.Turns...)
				all.Held += r.Held
				all.CPU += r.CPU
				all.Syscalls += r.Syscalls
			}
			b.StopTimer()
			masters, gets := width()
			cmds := srv() - gets // before the workers' Close: a Client's clean-up is not a turn's
			srvCPU := cpu()
			for _, p := range procs {
				p.quit()
			}
			if len(all.Waits) == 0 {
				b.Fatal("no acquisition")
			}
			reportContention(b, all.Waits, all.Turns, all.Held, cmds)
			n := float64(len(all.Waits))
			b.ReportMetric(float64(all.CPU.Microseconds())/n, "cli-cpu-µs/acq")
			b.ReportMetric(float64(all.Syscalls)/n, "cli-rw-calls/acq")
			b.ReportMetric(srvCPU*1e6/n, "srv-cpu-µs/acq")
			b.ReportMetric(masters, "holding-masters")
		})
	}
}

// sampleWidth reads key on every master at once, every widthEvery, until
// the function it returns is called; that returns how many masters held
// the value most of them held, on average over the samples where one held
// any (how wide the holders' keys are: a turn told by the fastest majority
// of five needs more than three), and the GETs it sent, which are no
// locker's.
func sampleWidth(servers []*redistest.Server, key string) func() (float64, int64) {
	const widthEvery = 10 * time.Millisecond
	admins := redistest.Clients(servers)
	stop, done := make(chan struct{}), make(chan struct{})
	var sum, samples, gets int64
	go func() {
		defer close(done)
		t := time.NewTicker(widthEvery)
		defer t.Stop()
		cmds := make([]*redis.StringCmd, len(admins))
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			var wg sync.WaitGroup
			for i, a := range admins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cmds[i] = a.Get(bg, key)
				}()
			}
			wg.Wait()
			gets += int64(len(admins))
			held := map[string]int64{}
			var most int64
			for _, c := range cmds {
				if v, err := c.Result(); err == nil {
					held[v]++
					most = max(most, held[v])
				}
			}
			if most > 0 {
				sum += most
				samples++
			}
		}
	}()
	return func() (float64, int64) {
		close(stop)
		<-done
		if samples == 0 {
			return 0, gets
		}
		return float64(sum) / float64(samples), gets
	}
}

// The words of the shared file.
const (
	sharedTarget    = iota // acquisitions to make in all
	sharedTotal            // acquisitions made
	sharedUnlocking        // when the last holder called release (UnixNano); 0: none yet
	sharedWords
)

// shared is a file mapped into the benchmark and its workers.
type shared struct {
	path string
	mem  []byte
}

func newShared(b *testing.B) *shared {
	path := filepath.Join(b.TempDir(), "shared")
	if err := os.WriteFile(path, make([]byte, 8*sharedFileWords), 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := mapShared(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = syscall.Munmap(s.mem) })
	return s
}

func mapShared(path string) (*shared, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8*sharedFileWords, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &shared{path: path, mem: mem}, nil
}

// word is the i-th word of the file (mmap aligns it to a page).
func (s *shared) word(i int) *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Pointer(&s.mem[8*i]))
}

// A workerReport is what a worker tells the benchmark as it ends.
type workerReport struct {
	Waits, Turns []time.Duration
	Held         time.Duration // the holds' total
	CPU          time.Duration // the worker's CPU, user and system, from go to its report
	Syscalls     int64         // its read and write system calls (/proc/self/io) meanwhile
	Err          string
}

// usage is the process's CPU so far, user and system, and its read and
// write system calls (0 where /proc/self/io cannot be read).
func usage() (time.Duration, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	io, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return cpu, 0
	}
	var calls int64
	for _, line := range strings.Split(string(io), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && (k == "syscr" || k == "syscw") {
			n, _ := strconv.ParseInt(v, 10, 64)
			calls += n
		}
	}
	return cpu, calls
}

// A workerProc is a worker process and its pipes.
type workerProc struct {
	b   *testing.B
	cmd *exec.Cmd
	in  *os.File
	out *bufio.Scanner
}

func startWorker(b *testing.B, impl string, addrs []string, shm string) *workerProc {
	cmd := exec.Command(os.Args[0], "-test.run=^TestContendedWorker$", "-test.count=1", "-contended.hold="+*holdFlag)
	cmd.Env = append(os.Environ(), "PEERS_WORKER="+impl, "PEERS_ADDRS="+strings.Join(addrs, ","), "PEERS_SHARED="+shm)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &workerProc{b: b, cmd: cmd, in: in.(*os.File), out: bufio.NewScanner(out)}
	p.out.Buffer(nil, 64<<20)
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

func (p *workerProc) send(line string) {
	if _, err := fmt.Fprintln(p.in, line); err != nil {
		p.b.Fatal(err)
	}
}

// await reads the worker's lines until want; its other lines (the test
// framework's) are skipped.
func (p *workerProc) await(want string) string {
	for p.out.Scan() {
		if l := p.out.Text(); strings.HasPrefix(l, want) {
			return l
		}
	}
	p.b.Fatalf("worker ended before %q: %v", want, p.out.Err())
	return ""
}

// report reads the worker's report, sent once the benchmark's count is
// reached and its last lock released.
func (p *workerProc) report() workerReport {
	var r workerReport
	if err := json.Unmarshal([]byte(strings.TrimPrefix(p.await("report "), "report ")), &r); err != nil {
		p.b.Fatal(err)
	}
	if r.Err != "" {
		p.b.Fatal(r.Err)
	}
	return r
}

// quit lets the worker close its locker and end, and waits for it.
func (p *workerProc) quit() {
	p.send("quit")
	if err := p.cmd.Wait(); err != nil {
		p.b.Fatalf("worker: %v", err)
	}
}

// TestContendedWorker is one locker of BenchmarkContendedProcesses, run by
// it; skipped otherwise.
func TestContendedWorker(t *testing.T) {
	impl := os.Getenv("PEERS_WORKER")
	if impl == "" {
		t.Skip("a worker of BenchmarkContendedProcesses")
	}
	var mk func([]redis.UniversalClient) locker
	for _, im := range procImpls {
		if im.name == impl {
			mk = im.make
		}
	}
	var clients []redis.UniversalClient
	for _, a := range strings.Split(os.Getenv("PEERS_ADDRS"), ",") {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		clients = append(clients, c)
	}
	shm, err := mapShared(os.Getenv("PEERS_SHARED"))
	if err != nil {
		t.Fatal(err)
	}
	lk := mk(clients)
	defer lk.close()
	var (
		target    = shm.word(sharedTarget).Load()
		total     = shm.word(sharedTotal)
		unlocking = shm.word(sharedUnlocking)
		r         workerReport
	)
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() {
		t.Fatal("no go")
	}
	cpu0, calls0 := usage()
	if dir := os.Getenv("PEERS_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.prof", impl, os.Getpid())))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	for {
		start := time.Now()
		release, err := lk.wait(bg, "contended")
		if err != nil {
			r.Err = err.Error()
			break
		}
		now := time.Now()
		done := total.Add(1) > target
		if !done {
			r.Waits = append(r.Waits, now.Sub(start))
			if u := unlocking.Swap(0); u != 0 {
				r.Turns = append(r.Turns, time.Duration(now.UnixNano()-u))
			}
		}
		hold(time.Millisecond) // the critical section
		end := time.Now()
		if !done {
			r.Held += end.Sub(now)
		}
		unlocking.Store(end.UnixNano())
		_ = release()
		if done {
			break
		}
	}
	cpu1, calls1 := usage()
	r.CPU, r.Syscalls = cpu1-cpu0, calls1-calls0
	js, _ := json.Marshal(r)
	fmt.Printf("report %s\n", js)
	in.Scan() // quit: the locker's Close (deferred) is no part of the count
}
