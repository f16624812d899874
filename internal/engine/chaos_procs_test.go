// Scenario 27: workers in processes of their own, under the fault
// schedule, their history checked for linearizability by porcupine.

package engine

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// The lock protects a counter in a file that every worker process maps:
// a worker that holds the lock reads it, works (chaosWork), and writes it
// back one higher, unless its lock's validity ended meanwhile. Each such
// increment is an operation of the history, from just before its read to
// just after its write, with the value it read. The history is
// linearizable (porcupine decides it, against counterModel) exactly when
// no increment was lost and none saw a value it should not have: when no
// two holders' sections overlapped. The workers are this test binary run
// again as TestChaosWorker, each with its own Client and its own
// connections, through the masters' fault proxies; they share nothing with
// each other or with the test but the masters and the file.

// procConfig is what a worker process is told, in REDLOCK_CHAOS_WORKER.
type procConfig struct {
	Addrs       []string      // the masters' proxies
	Key         string        // the lock's key
	Counter     string        // the counter file
	TTL         time.Duration // the lock's TTL
	NodeTimeout time.Duration
	Guard       time.Duration
	Work        time.Duration // the section's length between read and write
	Unlocked    bool          // the positive control: no lock at all
}

// procOp is one increment a worker made, as it reports it on stdout.
type procOp struct {
	Call, Return int64 // UnixNano: just before the read, just after the write
	Read         int64 // the counter's value it read (and wrote one higher)
	Token        string
}

const procOpPrefix = "redlock-op "

// procHistory runs workers processes while during runs (the fault
// schedule), then stops them and returns every increment they made.
func (s *scenario) procHistory(workers int, cfg procConfig, during func()) []porcupine.Operation {
	s.t.Helper()
	cfg.Counter = filepath.Join(s.t.TempDir(), "counter")
	if err := os.WriteFile(cfg.Counter, make([]byte, 8), 0o600); err != nil {
		s.t.Fatal(err)
	}
	for _, n := range s.cl.Nodes {
		cfg.Addrs = append(cfg.Addrs, n.ProxyAddr())
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		ops   []procOp
		errs  strings.Builder
	}
	procs := make([]*proc, workers)
	var wg sync.WaitGroup
	for i := range procs {
		p := &proc{cmd: exec.Command(os.Args[0], "-test.run=^TestChaosWorker$", "-test.count=1", "-test.v")}
		p.cmd.Env = append(os.Environ(), "REDLOCK_CHAOS_WORKER="+string(js))
		p.cmd.Stderr = &p.errs
		if p.stdin, err = p.cmd.StdinPipe(); err != nil {
			s.t.Fatal(err)
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			s.t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			s.t.Fatal(err)
		}
		s.t.Cleanup(func() { _ = p.cmd.Process.Kill() })
		procs[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line, ok := strings.CutPrefix(sc.Text(), procOpPrefix)
				if !ok {
					if strings.HasPrefix(sc.Text(), "--- FAIL") || strings.Contains(sc.Text(), "panic") {
						fmt.Fprintln(&p.errs, sc.Text())
					}
					continue
				}
				var op procOp
				if err := json.Unmarshal([]byte(line), &op); err == nil {
					p.ops = append(p.ops, op)
				}
			}
		}()
	}
	during()
	for _, p := range procs {
		_ = p.stdin.Close() // the worker's signal to stop
	}
	wg.Wait()
	var ops []porcupine.Operation
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			s.t.Fatalf("worker %d: %v\n%s", i, err, p.errs.String())
		}
		for _, op := range p.ops {
			ops = append(ops, porcupine.Operation{ClientId: i, Call: op.Call, Return: op.Return, Output: op.Read, Metadata: op.Token})
		}
	}
	return ops
}

// counterModel is the counter's sequential specification: an increment
// reads the value every earlier one left, and leaves it one higher.
var counterModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		v := state.(int64)
		return output.(int64) == v, v + 1
	},
	DescribeOperation: func(_, output any) string { return fmt.Sprintf("inc() read %d", output) },
	DescribeState:     func(state any) string { return fmt.Sprint(state) },
}

// linearizable checks ops with porcupine; when they are not, it returns a
// readable account: the operations around the first value read twice or
// skipped.
func linearizable(ops []porcupine.Operation) (porcupine.CheckResult, string) {
	res, _ := porcupine.CheckOperationsVerbose(counterModel, ops, time.Minute)
	if res == porcupine.Ok {
		return res, ""
	}
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Output.(int64), b.Output.(int64)) })
	at := 0
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Output.(int64) != sorted[i-1].Output.(int64)+1 {
			at = i
			break
		}
	}
	var b strings.Builder
	t0 := slices.MinFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) }).Call
	for _, op := range sorted[max(0, at-3):min(len(sorted), at+3)] {
		fmt.Fprintf(&b, "  worker %d: [%v, %v] read %d, token %v\n", op.ClientId,
			time.Duration(op.Call-t0), time.Duration(op.Return-t0), op.Output, op.Metadata)
	}
	return res, b.String()
}

// processes is scenario 27: workers processes contend under the fault
// schedule, and their history must be linearizable.
func (s *scenario) processes(workers int) {
	length := soakLength()
	var faults int
	ops := s.procHistory(workers, s.procConfig(false), func() { faults = s.faultSchedule(length) })
	s.t.Logf("%d processes, %v, %d faults: %d increments", workers, length, faults, len(ops))
	if len(ops) == 0 {
		s.t.Fatal("no increment during the soak")
	}
	if res, account := linearizable(ops); res != porcupine.Ok {
		s.t.Fatalf("SAFETY VIOLATION (seed %d): porcupine says %s of %d increments\n%s", s.seed, res, len(ops), account)
	}
}

// processesUnlocked is scenario 27's positive control: the same workers
// without the lock; porcupine must find the lost updates.
func (s *scenario) processesUnlocked(workers int) {
	ops := s.procHistory(workers, s.procConfig(true), func() { time.Sleep(chaosRun) }) // the load phase's length
	res, account := linearizable(ops)
	if res != porcupine.Illegal {
		s.t.Fatalf("positive control: porcupine says %s of %d unlocked increments", res, len(ops))
	}
	s.t.Logf("detected as expected, %d increments:\n%s", len(ops), account)
}

func (s *scenario) procConfig(unlocked bool) procConfig {
	return procConfig{Key: s.key, TTL: chaosTTL, NodeTimeout: chaosNodeD, Guard: chaosGuard, Work: chaosWork, Unlocked: unlocked}
}

// TestChaosWorker is one worker process of scenario 27; skipped otherwise.
// It increments the counter under the lock until its stdin closes, and
// prints each increment.
func TestChaosWorker(t *testing.T) {
	js := os.Getenv("REDLOCK_CHAOS_WORKER")
	if js == "" {
		t.Skip("a worker process of TestChaos's scenario 27")
	}
	var cfg procConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	var nodes []redis.UniversalClient
	for _, a := range cfg.Addrs {
		rc := redis.NewClient(&redis.Options{Addr: a})
		defer rc.Close()
		nodes = append(nodes, rc)
	}
	c, err := New(nodes, WithNodeTimeout(cfg.NodeTimeout), WithRestartGuard(cfg.Guard))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := os.OpenFile(cfg.Counter, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	var buf [8]byte
	for ctx.Err() == nil {
		var l *Lock
		if !cfg.Unlocked {
			if l, err = c.Lock(ctx, cfg.Key, cfg.TTL); err != nil {
				continue // the fault schedule, or the end
			}
		}
		call := time.Now()
		if _, err := f.ReadAt(buf[:], 0); err != nil {
			t.Fatal(err)
		}
		v := int64(binary.LittleEndian.Uint64(buf[:]))
		time.Sleep(cfg.Work) // the work itself, not synchronisation
		if l == nil || time.Now().Before(l.Until()) {
			binary.LittleEndian.PutUint64(buf[:], uint64(v+1))
			if _, err := f.WriteAt(buf[:], 0); err != nil {
				t.Fatal(err)
			}
			op, _ := json.Marshal(procOp{Call: call.UnixNano(), Return: time.Now().UnixNano(), Read: v, Token: tokenOf(l)})
			fmt.Printf("%s%s\n", procOpPrefix, op)
		}
		if l != nil {
			_ = l.Unlock(context.Background())
		}
	}
}

func tokenOf(l *Lock) string {
	if l == nil {
		return ""
	}
	return l.Token()
}
