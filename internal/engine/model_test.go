package engine

import (
	"testing"

	"github.com/redlock-go/redlock/internal/model"
)

// TestProtocolModel explores the protocol core (internal/core, the code
// the rounds here decide with) in the model checker's two worlds, so
// that the root package's mutants of the core meet it: no two holders'
// validity windows overlap in any interleaving within its bounds. make
// model explores deeper.
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
}
