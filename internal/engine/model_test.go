package engine

import (
	"testing"

	"github.com/redlock-go/redlock/internal/model"
)

// TestProtocolModel explores the protocol core (internal/core, the code
// the rounds here decide with) in the model checker's worlds, so that
// this package's mutants of the core meet it: no two holders' validity
// windows overlap in any interleaving within its bounds, and the hand-off
// world holds W1 and leaves no token behind. make model explores deeper.
func TestProtocolModel(t *testing.T) {
	if raceEnabled {
		t.Skip("the model explores millions of states: run it without -race (make model)")
	}
	for name, cfg := range map[string]model.Config{"guard": model.DefaultConfig(), "extend": model.ExtendConfig()} {
		t.Run(name, func(t *testing.T) {
			r := model.Check(cfg)
			t.Logf("%v", r)
			if r.Violation != "" {
				t.Fatal(r)
			}
		})
	}
	t.Run("hand-off", func(t *testing.T) {
		r := model.CheckHandOff(true)
		t.Logf("%v", r)
		if r.Violation != "" {
			t.Fatal(r)
		}
	})
}
