package model

import (
	"flag"
	"strings"
	"testing"
)

var (
	depth  = flag.Int("model.horizon", 0, "the last tick to explore (default: the worlds' own)")
	losses = flag.Int("model.losses", -1, "messages lost, at most (default: the worlds' own)")
	world  = flag.String("model.world", "", `"all": one world with restarts and Extend (29 million states)`)
)

// TestModel explores the guard's world, Extend's, a driver's re-sends',
// clock drift's and the local hand-off's (or, with -model.world=all, the guard's and Extend's
// at once), deeper with -model.horizon, and fails with the shortest trace
// to any two holders at once, a token nobody holds left on a master, or a
// token left where an Unlock that returned nil released it.
func TestModel(t *testing.T) {
	if raceEnabled {
		t.Skip("the model explores millions of states: run it without -race (make model)")
	}
	worlds := map[string]Config{"guard": DefaultConfig(), "extend": ExtendConfig(), "repair": RepairConfig(), "resend": ResendConfig(), "drift": DriftConfig(), "local": LocalConfig()}
	if *world == "all" {
		worlds = map[string]Config{"all": AllConfig()}
	}
	for name, cfg := range worlds {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the worlds are independent, and each checks on one core
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

// The positive control of the third property: a release that does not
// wait for its acquire's reply lets a driver's re-send of that acquire put
// the token back after an Unlock returned nil, and the checker says how.
func TestModelFindsAReleaseThatOvertakesItsAcquire(t *testing.T) {
	releaseEarly = true
	defer func() { releaseEarly = false }()
	r := Check(ResendConfig())
	t.Logf("%v", r)
	if !strings.Contains(r.Violation, "whose Unlock returned nil") {
		t.Fatal("no token found where an Unlock released it: the checker cannot see a re-send")
	}
}

// The positive control of the second property: a Client that loses a
// round and leaves its keys leaves a token nobody holds.
func TestModelFindsALostRoundsKeysLeft(t *testing.T) {
	lostRoundKept = true
	defer func() { lostRoundKept = false }()
	r := Check(ResendConfig())
	t.Logf("%v", r)
	if !strings.Contains(r.Violation, "no live holder has") {
		t.Fatal("no token left behind found: the checker cannot see a key nobody holds")
	}
}

// The positive control of the drift world: masters whose clocks run fast
// beyond the drift the Clients allow (two ticks of a four-tick TTL, 20 ms
// against 10 ms) let a second holder in, and the checker says how.
func TestModelFindsAClockFasterThanTheDriftAllows(t *testing.T) {
	cfg := DriftConfig()
	cfg.Fast, cfg.Guard, cfg.Unreached = 2, 0, 0
	r := Check(cfg)
	t.Logf("%v", r)
	if !strings.Contains(r.Violation, "two holders") {
		t.Fatal("no second holder found: the checker cannot see clock drift")
	}
}

// The positive control of the repair world: an Extend whose repair puts
// back a key the master did not lose (one Unlock deleted) leaves a token
// where an Unlock that returned nil released it, and the checker says how.
func TestModelFindsARepairOfAKeyTheMasterDidNotLose(t *testing.T) {
	repairsAnyKey = true
	defer func() { repairsAnyKey = false }()
	r := Check(RepairConfig())
	t.Logf("%v", r)
	if r.Violation == "" {
		t.Fatal("no violation with any missing key repaired: the checker cannot see the repair")
	}
}

// The local hand-off world finds a hand-off script that replaces any key,
// not only the holder's: client 0's next local waiter takes client 1's
// key, and both hold the lock.
func TestModelFindsAHandOffThatTakesAnotherClientsKey(t *testing.T) {
	if raceEnabled {
		t.Skip("it explores 3.7 million states: run it without -race (make model)")
	}
	handOffTakesAnyKey = true
	defer func() { handOffTakesAnyKey = false }()
	r := Check(LocalConfig())
	t.Logf("%v", r)
	if r.Violation == "" {
		t.Fatal("no violation found with a hand-off that takes any key: the checker cannot see the local hand-off")
	}
}
