package model

import (
	"flag"
	"testing"
)

var (
	depth  = flag.Int("model.horizon", 0, "the last tick to explore (default: the worlds' own)")
	losses = flag.Int("model.losses", -1, "messages lost, at most (default: the worlds' own)")
	world  = flag.String("model.world", "", `"all": one world with restarts and Extend (29 million states)`)
)

// TestModel explores the guard's world and Extend's (or, with
// -model.world=all, both at once), deeper with -model.horizon, and fails
// with the shortest trace to any two holders at once.
func TestModel(t *testing.T) {
	if raceEnabled {
		t.Skip("the model explores millions of states: run it without -race (make model)")
	}
	worlds := map[string]Config{"guard": DefaultConfig(), "extend": ExtendConfig()}
	if *world == "all" {
		worlds = map[string]Config{"all": AllConfig()}
	}
	for name, cfg := range worlds {
		t.Run(name, func(t *testing.T) {
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
		})
	}
}

// The model's Extend finds a master that shortens a key: with
// extendMaster setting the key to now + ttl, a shorter extension lets
// another Client in while the holder's end is unchanged.
func TestModelFindsAnExtendThatShortensTheKey(t *testing.T) {
	shortens = true
	defer func() { shortens = false }()
	r := Check(ExtendConfig())
	t.Logf("%v", r)
	if r.Violation == "" {
		t.Fatal("no violation found with keys shortened: the checker cannot see Extend")
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
