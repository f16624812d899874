package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAHungMasterShowsInTheLogAndTheMetrics runs the example with the
// fifth master hanging halfway: the log must warn once that it is failing
// while it hangs, the metrics must count its timeouts (and no other
// master's), and the trace file must hold the calls' spans.
func TestAHungMasterShowsInTheLogAndTheMetrics(t *testing.T) {
	var out, log bytes.Buffer
	traces := filepath.Join(t.TempDir(), "traces.json")
	if err := run(context.Background(), []string{"-duration", "1500ms", "-hang-at", "500ms", "-traces", traces}, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), log.String())
	}
	hung, _, _ := strings.Cut(log.String(), "example: the fifth master answers again")
	warn := regexp.MustCompile(`level=WARN msg="redlock: master failing" node=4 addr=(\S+) outcome=timeout`).FindAllStringSubmatch(hung, -1)
	if len(warn) != 1 {
		t.Fatalf("want one warning that master 4 fails, got %d:\n%s", len(warn), log.String())
	}
	addr := warn[0][1]
	errs := regexp.MustCompile(`redlock_node_errors_total\{error_type="timeout",server_address="([^"]+)"\} (\d+)`).FindAllStringSubmatch(out.String(), -1)
	if len(errs) != 1 || errs[0][1] != addr || errs[0][2] == "0" {
		t.Fatalf("timeouts in the metrics %v, want some for %s only:\n%s", errs, addr, out.String())
	}
	if !strings.Contains(out.String(), `redlock_lock_acquisitions_total{redlock_outcome="obtained"}`) {
		t.Fatalf("no obtained acquisitions in the metrics:\n%s", out.String())
	}
	spans, err := os.ReadFile(traces)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"Name":"redlock.lock"`, `"Name":"redlock.unlock"`, `"Name":"redlock.round"`} {
		if !bytes.Contains(spans, []byte(name)) {
			t.Fatalf("the trace file has no %s", name)
		}
	}
	if bytes.Contains(spans, []byte("report:daily")) {
		t.Fatal("the trace file holds the lock key; only its hash belongs there")
	}
}
