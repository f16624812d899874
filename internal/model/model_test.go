package model

import (
	"flag"
	"testing"
)

var (
	depth  = flag.Int("model.horizon", 0, "the last tick to explore (default: DefaultConfig's)")
	losses = flag.Int("model.losses", -1, "messages lost, at most (default: DefaultConfig's)")
)

// TestModel explores the default world, or a deeper one with
// -model.horizon, and fails with the shortest trace to any two holders at
// once.
func TestModel(t *testing.T) {
	if raceEnabled {
		t.Skip("the model explores millions of states: run it without -race (make model)")
	}
	cfg := DefaultConfig()
	if *depth > 0 {
		cfg.Horizon = *depth
		cfg.MaxStates = 0
	}
	if *losses >= 0 {
		cfg.Losses = *losses
	}
	r := Check(cfg)
	t.Logf("%+v: %v", cfg, r)
	if r.Violation != "" {
		t.Fatal(r)
	}
	if !r.Complete {
		t.Fatalf("stopped at %d states before exploring every one", r.States)
	}
}

// The positive control: without the restart guard, a master that restarts
// without its data lets a second holder in, and the checker says how.
func TestModelFindsTheRestartWithoutTheGuard(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Guard = 0
	r := Check(cfg)
	t.Logf("%v", r)
	if r.Violation == "" {
		t.Fatal("no violation found without the guard: the checker cannot see a restart")
	}
}
