package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/redlocktest"
)

// panicky is an adapter whose calls panic, as one with a nil client inside
// would; it is not a zero value.
type panicky struct{ name string }

func (panicky) Subscribe() driver.Subscription { panic("no client") }

func (panicky) Topology() driver.Topology                        { return driver.Topology{Addrs: []string{"panicky:1"}} }
func (panicky) Do(context.Context, ...any) driver.Reply          { panic("no client") }
func (panicky) DoMulti(context.Context, ...[]any) []driver.Reply { panic("no client") }

// A zero adapter Conn, or an adapter that panics, is bad input: New returns
// ErrInvalidArgument, and the process lives (the panic was on a goroutine of
// New's, where the caller could not recover it).
func TestNewFromDriversRefusesAConnOfNoClientAndAPanickingOne(t *testing.T) {
	m := redlocktest.Start(t, 3)
	good := goredis.Wrap(m.Clients())
	for name, bad := range map[string]driver.Conn{
		"zero goredis.Conn": goredis.Conn{},
		"goredis.New(nil)":  goredis.New(nil),
		"panicking adapter": panicky{"p"},
	} {
		_, err := redlock.NewFromDrivers([]driver.Conn{bad, good[1], good[2]})
		if !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("%s: NewFromDrivers: %v, want ErrInvalidArgument", name, err)
			continue
		}
		// A zero Conn is refused before it runs; a panic is named as one.
		if want := map[bool]string{true: "panicked", false: "made of no client"}[name == "panicking adapter"]; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: NewFromDrivers: %v, want it to say %q", name, err, want)
		}
	}
}
