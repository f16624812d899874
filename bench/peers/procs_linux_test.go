package peers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
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
// can cost, does. Run it with -benchtime Nx (every run starts 8
// processes):
//
//	cd bench/peers && go test -run '^$' -bench ContendedProcesses -benchtime 3000x .
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
			}
			b.StopTimer()
			cmds := srv() // before the workers' Close: a Client's clean-up is not a turn's
			for _, p := range procs {
				p.quit()
			}
			if len(all.Waits) == 0 {
				b.Fatal("no acquisition")
			}
			reportContention(b, all.Waits, all.Turns, all.Held, cmds)
		})
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
	Err          string
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
	js, _ := json.Marshal(r)
	fmt.Printf("report %s\n", js)
	in.Scan() // quit: the locker's Close (deferred) is no part of the count
}
