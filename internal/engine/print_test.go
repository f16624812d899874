// Printing: no exported type shows a token through fmt or log/slog
// (issue 37 point 5).

package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// printVerbs are the fmt verbs a value is printed with: those a Stringer
// answers (v, s, q, x, X), their flags, and one it does not (d), which
// fmt otherwise applies to a struct's fields one by one.
var printVerbs = []string{"%v", "%+v", "%#v", "%s", "%q", "%+q", "%#q", "%x", "%X", "% x", "%d", "%10.3v"}

// printings returns v printed with every verb of printVerbs and logged by
// slog's text and JSON handlers, as an attribute, in a group, and as the
// message's only argument, keyed by how it was printed.
func printings(v any) map[string]string {
	out := map[string]string{}
	for _, verb := range printVerbs {
		out[verb] = fmt.Sprintf(verb, v)
	}
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		l := slog.New(h(&b))
		l.Info("value", slog.Any("v", v))
		l.Info("group", slog.Group("g", slog.Any("v", v)))
		l.Info("args", "v", v)
		l.With("w", v).WithGroup("inner").Info("with", "v", v)
		out["slog "+name] = b.String()
	}
	return out
}

// leaks returns how s shows one of tokens, raw or hex-encoded, or "".
func leaks(s string, tokens []string) string {
	for _, tok := range tokens {
		if tok == "" {
			continue
		}
		h := hex.EncodeToString([]byte(tok))
		spaced := strings.TrimSpace(fmt.Sprintf("% x", tok))
		for _, form := range []string{tok, h, strings.ToUpper(h), spaced} {
			if strings.Contains(s, form) {
				return form
			}
		}
	}
	if strings.Contains(s, "PANIC") || strings.Contains(s, "panicked") {
		return "a panic"
	}
	return ""
}

// Every exported type that can hold a token, or a value a master stores,
// prints neither with any fmt verb nor through slog's handlers: locks from
// every way of getting one (held and released), inspections, errors,
// observer events, and the Client, whose hand-offs leave it tokens.
func TestNoExportedTypePrintsAToken(t *testing.T) {
	m := newMinis(t, 3, nil)
	var mu sync.Mutex
	var events []any
	record := func(e any) { mu.Lock(); events = append(events, e); mu.Unlock() }
	c := m.client(WithObserver(Observer{
		Round:           func(e RoundEvent) { record(e) },
		NodeReply:       func(e NodeReplyEvent) { record(e) },
		NodeState:       func(e NodeStateEvent) { record(e) },
		Acquire:         func(e AcquireEvent) { record(e) },
		Extend:          func(e ExtendEvent) { record(e) },
		Release:         func(e ReleaseEvent) { record(e) },
		DoEnd:           func(e DoEvent) { record(e) },
		Quarantine:      func(e QuarantineEvent) { record(e) },
		NoticesDegraded: func(e NoticesDegradedEvent) { record(e) },
		Notice:          func(e NoticeEvent) { record(e) },
	}))
	other := m.client()

	type subject struct {
		name string
		v    any
	}
	var subjects []subject
	var tokens []string
	add := func(name string, v any) { subjects = append(subjects, subject{name, v}) }
	check := func(phase string) {
		t.Helper()
		for _, s := range subjects {
			for how, out := range printings(s.v) {
				if form := leaks(out, tokens); form != "" {
					t.Errorf("%s: %s printed with %s shows %q:\n%s", phase, s.name, how, form, out)
				}
			}
		}
	}

	tried, err := c.TryLock(bg, "print:try", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	locked, err := c.Lock(bg, "print:lock", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	multi, err := c.TryLockMulti(bg, []string{"print:a", "print:b"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := other.Resume(bg, "print:try", tried.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, tried.Token(), locked.Token(), multi.Token())
	add("a *Lock from TryLock", tried)
	add("a *Lock from Lock", locked)
	add("a *Lock from TryLockMulti", multi)
	add("a *Lock from Resume", resumed)
	add("a nil *Lock", (*Lock)(nil))
	add("a zero *Lock", &Lock{})

	var inDo *Lock
	if err := c.Do(bg, "print:do", time.Minute, func(ctx context.Context) error {
		inDo = LockFromContext(ctx)
		tokens = append(tokens, inDo.Token())
		add("Do's ctx", ctx)
		for how, out := range printings(ctx) { // ctx holds the lock; printed while it is held
			if form := leaks(out, tokens); form != "" {
				t.Errorf("Do's ctx printed with %s shows %q:\n%s", how, form, out)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	add("a *Lock from LockFromContext", inDo)

	in, err := c.Inspect(bg, "print:try")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(in.values, " "), tried.Token()) {
		t.Fatalf("Inspect: the values %q hold no token: nothing to hide", in.values)
	}
	add("an Inspection", in)
	add("an *Inspection", &in)
	inMulti, err := c.Inspect(bg, "print:a")
	if err != nil {
		t.Fatal(err)
	}
	add("an Inspection of a multi-key lock's key", inMulti)

	_, err = other.TryLock(bg, "print:lock", time.Minute) // refused: the errors name the holder
	var qe *QuorumError
	if !errors.As(err, &qe) || len(qe.Nodes) == 0 {
		t.Fatalf("TryLock of a held key: %v, want a *QuorumError with its refusals", err)
	}
	add("TryLock's error", err)
	add("a *QuorumError", qe)
	add("a *NodeError", qe.Nodes[0])
	_, err = other.Resume(bg, "print:lock", locked.Token()[:35], time.Minute) // a token cut short
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Resume with a token cut short: %v, want ErrInvalidArgument", err)
	}
	add("Resume's error", err)

	c.retire("print:lock", locked.Token(), time.Minute, locked) // as a hand-off gives it
	add("a *Client", c)
	add("a Client's Observer", c.cfg.obs)
	add("a nil *Client", (*Client)(nil))

	check("held")
	for _, want := range []struct{ got, want string }{
		{fmt.Sprintf("%+v", tried), `redlock.Lock{key: "print:try", masters: 3, until: `},
		{fmt.Sprint(multi), `redlock.Lock{keys: ["print:a" "print:b"], masters: 3, until: `},
		{fmt.Sprintf("%#v", in), `redlock.Inspection{key: "print:try", masters: 3, quorum: 2, answered: 3, holding: 3, `},
		{fmt.Sprint((*Lock)(nil)), "<nil>"},
		{fmt.Sprintf("%d", &Lock{}), `%!d(*redlock.Lock=redlock.Lock{key: "", masters: 0, state: not held})`},
	} {
		if !strings.HasPrefix(want.got, want.want) {
			t.Errorf("printed %s, want it to begin %s", want.got, want.want)
		}
	}
	if s := fmt.Sprint(tried); !strings.HasSuffix(s, "state: held}") {
		t.Errorf("a held lock prints as %s, want its state held", s)
	}

	if err := tried.Extend(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Lock{tried, locked, multi} {
		if err := l.Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	if err := resumed.Unlock(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a lock its resumed twin released: %v, want ErrNotHeld", err)
	}
	add("Unlock's error", resumed.Unlock(bg))
	settle(c)
	mu.Lock()
	for _, e := range events {
		add(fmt.Sprintf("a %T", e), e)
	}
	mu.Unlock()
	check("released")
	if s := fmt.Sprint(tried); !strings.HasSuffix(s, "state: unlocked}") {
		t.Errorf("an unlocked lock prints as %s, want its state unlocked", s)
	}
}
