package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// The public package forwards to internal/engine: these tests hold each
// forwarding path to the contract the doc comments state, on five
// in-process masters. The engine's own tests hold the contracts
// themselves.

// TestTheZeroValuesAreRefused: a Client not made by New refuses every
// call with ErrInvalidArgument, and a nil or zero Lock is held by nobody,
// without a panic.
func TestTheZeroValuesAreRefused(t *testing.T) {
	ctx := context.Background()
	for _, c := range []*redlock.Client{nil, new(redlock.Client)} {
		if _, err := c.TryLock(ctx, "k", time.Second); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("TryLock on %v: %v, want ErrInvalidArgument", c, err)
		}
		if err := c.Close(); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Close on %v: %v, want ErrInvalidArgument", c, err)
		}
	}
	for _, l := range []*redlock.Lock{nil, new(redlock.Lock)} {
		if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Unlock of %v: %v, want ErrNotHeld", l, err)
		}
		if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Extend of %v: %v, want ErrNotHeld", l, err)
		}
		select {
		case <-l.Done():
		default:
			t.Errorf("Done of %v is open", l)
		}
		if !l.Until().IsZero() || l.Token() != "" || l.Key() != "" || l.Keys() != nil {
			t.Errorf("%v: Until %v, Token %q, Key %q, Keys %q, want zero", l, l.Until(), l.Token(), l.Key(), l.Keys())
		}
	}
	if l := redlock.LockFromContext(context.Background()); l != nil {
		t.Errorf("LockFromContext of a context without a lock: %v, want nil", l)
	}
	// The zero values print as the engine's zero values do (their doc
	// comments): a zero Lock is "not held", never "<nil>".
	if s := fmt.Sprint(new(redlock.Lock)); !strings.Contains(s, "not held") {
		t.Errorf("a zero Lock prints %q, want its state, not held", s)
	}
	if s := fmt.Sprint(new(redlock.Client)); !strings.Contains(s, "masters: 0") {
		t.Errorf("a zero Client prints %q, want its masters: 0", s)
	}
	if s := fmt.Sprint((*redlock.Lock)(nil)); s != "<nil>" {
		t.Errorf("a nil *Lock prints %q, want <nil>", s)
	}
}

// TestEveryCallForwards takes, extends, fences, inspects, resumes and
// releases a lock through the public API, and finds Do's lock in its
// context.
func TestEveryCallForwards(t *testing.T) {
	nodes, stop := fiveMasters()
	defer stop()
	var rounds int
	var acquired []string // the Key of every Acquire event
	c, err := redlock.New(nodes, redlock.WithObserver(redlock.Observer{
		Round:   func(redlock.RoundEvent) { rounds++ },
		Acquire: func(e redlock.AcquireEvent) { acquired = append(acquired, e.Key) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.TryLock(ctx, "facade", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.Key() != "facade" || l.Token() == "" || time.Until(l.Until()) <= 0 {
		t.Fatalf("lock %v: key %q, token %q, until %v", l, l.Key(), l.Token(), l.Until())
	}
	if l2, err := c.TryLock(ctx, "facade", time.Second); l2 != nil || !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("a second TryLock: %v, %v, want a nil Lock and ErrNotObtained", l2, err)
	}
	var qe *redlock.QuorumError
	if _, err := c.TryLock(ctx, "facade", time.Second); !errors.As(err, &qe) || qe.Key != "facade" {
		t.Fatalf("a second TryLock: %v, want a *QuorumError for the key", err)
	}
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if f, err := l.Fence(ctx); err != nil || f == 0 {
		t.Fatalf("Fence: %d, %v", f, err)
	}
	in, err := c.Inspect(ctx, "facade")
	if err != nil || in.Holding != 5 || in.HoldingFor(l.Token()) != 5 {
		t.Fatalf("Inspect: %+v, %v", in, err)
	}
	if held, err := l.Held(ctx); err != nil || !held {
		t.Fatalf("Held: %v, %v", held, err)
	}
	r, err := c.Resume(ctx, "facade", l.Token(), 10*time.Second)
	if err != nil || r.Token() != l.Token() {
		t.Fatalf("Resume: %v, %v", r, err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lock Resume released: %v, want ErrNotHeld", err)
	}

	// A multi-key lock's Key is its name, the Key its events carry; Keys
	// are its keys.
	m, err := c.LockMulti(ctx, []string{"{f}a", "{f}b"}, 10*time.Second)
	if err != nil || fmt.Sprint(m.Keys()) != "[{f}a {f}b]" || m.Key() != "{f}a,{f}b" || acquired[len(acquired)-1] != m.Key() {
		t.Fatalf("LockMulti: %v, %v: Keys %q, Key %q, its Acquire event's Key %q", m, err, m.Keys(), m.Key(), acquired[len(acquired)-1])
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	var inside string
	err = c.Do(ctx, "facade", 10*time.Second, func(ctx context.Context) error {
		l := redlock.LockFromContext(ctx)
		if l == nil {
			return errors.New("no lock in Do's context")
		}
		if again := redlock.LockFromContext(ctx); again != l {
			return fmt.Errorf("LockFromContext returned %p, then %p: one Do, two *Lock", l, again)
		}
		inside = l.Token()
		_, err := l.Fence(ctx)
		return err
	})
	if err != nil || inside == "" {
		t.Fatalf("Do: %v (token %q)", err, inside)
	}
	if rounds == 0 {
		t.Fatal("the observer saw no round")
	}
}

// TestALockPrintsNoToken: a Lock and a Client print, format and log as
// the engine's do, never with a token.
func TestALockPrintsNoToken(t *testing.T) {
	nodes, stop := fiveMasters()
	defer stop()
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(context.Background(), "printed", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("held", "lock", l, "client", c)
	for _, s := range []string{fmt.Sprint(l), fmt.Sprintf("%#v", l), fmt.Sprintf("%+v", c), logged.String()} {
		if strings.Contains(s, l.Token()) {
			t.Errorf("%q shows the token", s)
		}
		if !strings.Contains(s, "redlock") && !strings.Contains(s, "printed") {
			t.Errorf("%q names neither the package nor the key", s)
		}
	}
}

// TestEverySentinelMatchesItselfWrapped: every exported sentinel error
// (every Err… variable of the package, found by parsing it, so that a new
// one cannot be left out) still matches itself through errors.Is once
// wrapped with %w, joined, or both, and matches no other sentinel.
func TestEverySentinelMatchesItselfWrapped(t *testing.T) {
	sentinels := map[string]error{
		"ErrNotObtained":     redlock.ErrNotObtained,
		"ErrNotHeld":         redlock.ErrNotHeld,
		"ErrInvalidArgument": redlock.ErrInvalidArgument,
		"ErrClosed":          redlock.ErrClosed,
		"ErrLockLost":        redlock.ErrLockLost,
		"ErrNodeTimeout":     redlock.ErrNodeTimeout,
		"ErrNodeRefused":     redlock.ErrNodeRefused,
		"ErrNodeQuarantined": redlock.ErrNodeQuarantined,
		"ErrGuardRights":     redlock.ErrGuardRights,
		"ErrEvictionPolicy":  redlock.ErrEvictionPolicy,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if _, listed := sentinels[n.Name]; n.IsExported() && strings.HasPrefix(n.Name, "Err") && !listed {
						t.Errorf("sentinel %s is not in this test's table", n.Name)
					}
				}
			}
		}
	}
	for name, s := range sentinels {
		if s == nil {
			t.Fatalf("%s is nil", name)
		}
		wrapped := fmt.Errorf("redlock: op %q: %w", "k", s)
		for _, err := range []error{wrapped, fmt.Errorf("outer: %w", wrapped), errors.Join(context.Canceled, wrapped)} {
			if !errors.Is(err, s) {
				t.Errorf("%s: errors.Is(%q, %s) is false", name, err, name)
			}
			for other, o := range sentinels {
				if other != name && errors.Is(err, o) {
					t.Errorf("%s wrapped matches %s too", name, other)
				}
			}
		}
	}
}
