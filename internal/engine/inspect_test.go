package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
)

// Inspect reports how many masters hold the key, the smallest and largest
// TTL left there, and which token holds it, without exposing the token.
func TestInspectReportsHoldersAndTTLs(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l := mustLock(t, c, "k", 10*time.Second)
	if err := r.admin[4].Del(bg, "k").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.admin[3].PExpire(bg, "k", 3*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(bg, "k")
	if err != nil {
		t.Fatal(err)
	}
	if in.Key != "k" || in.Masters != 5 || in.Quorum != 3 || in.Answered != 5 || in.Holding != 4 || len(in.Failed) != 0 {
		t.Fatalf("Inspect = %+v, want 5 masters answered, 4 holding", in)
	}
	if in.MinTTL > 3*time.Second || in.MinTTL < time.Second {
		t.Fatalf("MinTTL = %v, want the shortened master's ~3s", in.MinTTL)
	}
	if in.MaxTTL > 10*time.Second || in.MaxTTL < 8*time.Second {
		t.Fatalf("MaxTTL = %v, want ~10s", in.MaxTTL)
	}
	if n := in.HoldingFor(l.Token()); n != 4 {
		t.Fatalf("HoldingFor(the lock's token) = %d, want 4", n)
	}
	if n := in.HoldingFor(uuid.NewString()); n != 0 {
		t.Fatalf("HoldingFor(another token) = %d, want 0", n)
	}
	if n := in.HoldingFor(""); n != 0 {
		t.Fatalf("HoldingFor(\"\") = %d, want 0", n)
	}
	if held, err := l.Held(bg); !held || err != nil {
		t.Fatalf("Held = %v, %v; want true", held, err)
	}

	// A waiter of another Client marks the key as wanted (its wanted key):
	// still the holder's.
	other := r.client()
	if _, err := other.TryLock(bg, "k", 10*time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("TryLock of a held key = %v", err)
	}
	settle(other)
	if in, err := c.Inspect(bg, "k"); err != nil || in.HoldingFor(l.Token()) != 4 {
		t.Fatalf("after another's attempt marked the key: HoldingFor = %d, %v; want 4", in.HoldingFor(l.Token()), err)
	}

	if err := l.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	settle(c)
	in, err = c.Inspect(bg, "k")
	if err != nil || in.Holding != 0 || in.MinTTL != 0 || in.MaxTTL != 0 || in.HoldingFor(l.Token()) != 0 {
		t.Fatalf("after Unlock: Inspect = %+v, %v; want nobody holding", in, err)
	}
	if held, err := l.Held(bg); held || err != nil {
		t.Fatalf("Held after Unlock = %v, %v; want false", held, err)
	}
}

// Held is false once the lock's validity ended, even while its keys live
// on (here lengthened behind the library's back): Until, not the masters,
// says whether it is held.
func TestHeldIsFalseAfterUntilWhateverTheMastersSay(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	l := mustLock(t, c, "k", scaled(200*time.Millisecond))
	for _, a := range r.admin {
		a.PExpire(bg, "k", time.Minute) // where the key still lives
	}
	<-l.Done()
	in, err := c.Inspect(bg, "k")
	if err != nil || in.HoldingFor(l.Token()) < 3 {
		t.Fatalf("Inspect = %+v, %v; want the lengthened keys on a majority", in, err)
	}
	if held, err := l.Held(bg); held || err != nil {
		t.Fatalf("Held after Until = %v, %v; want false", held, err)
	}
}

// Inspect only reads: it runs on masters at maxmemory, writes nothing (no
// marker, no key), and keeps no key alive.
func TestInspectOnlyReads(t *testing.T) {
	r := startReal(t, 5)
	c := r.client()
	size := func() (n int64) {
		for _, a := range r.admin {
			n += a.DBSize(bg).Val()
		}
		return n
	}
	before := size()
	r.setMaxmemory(t, "1", 0, 1, 2, 3, 4)
	t.Cleanup(func() { r.setMaxmemory(t, "0", 0, 1, 2, 3, 4) })
	in, err := c.Inspect(bg, "absent")
	if err != nil || in.Answered != 5 || in.Holding != 0 {
		t.Fatalf("Inspect on masters at maxmemory = %+v, %v; want 5 answers, none holding", in, err)
	}
	if after := size(); after != before {
		t.Fatalf("Inspect wrote: %d keys before, %d after", before, after)
	}
}

// A key of another kind blocks a lock: Inspect counts it as held, by no
// token.
func TestInspectCountsAKeyOfAnotherKind(t *testing.T) {
	r := startReal(t, 3)
	c := r.client()
	if err := r.admin[0].HSet(bg, "k", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(bg, "k")
	if err != nil || in.Holding != 1 || in.MinTTL != -1 || in.MaxTTL != -1 {
		t.Fatalf("Inspect = %+v, %v; want one holding, with no expiry (-1)", in, err)
	}
}

// Without a majority of answers, Inspect returns what it has with
// ErrNotObtained, the hung masters' timeouts, within the node deadline;
// with an ended ctx, ctx's error.
func TestInspectWithoutAMajority(t *testing.T) {
	r := startReal(t, 5)
	c := r.client(WithNodeTimeout(scaled(100 * time.Millisecond)))
	for i := 2; i < 5; i++ {
		r.servers[i].Pause()
	}
	start := time.Now()
	in, err := c.Inspect(bg, "k")
	took := time.Since(start)
	var qe *QuorumError
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, ErrNodeTimeout) || !errors.As(err, &qe) {
		t.Fatalf("Inspect with three masters of five hung = %v, want ErrNotObtained with their timeouts", err)
	}
	if in.Answered != 2 || len(in.Failed) != 3 {
		t.Fatalf("Inspect = %+v, want 2 answers and 3 failures", in)
	}
	if took > scaled(100*time.Millisecond)+scaled(time.Second) {
		t.Fatalf("Inspect took %v, past its node deadline", took)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := c.Inspect(ctx, "k"); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Inspect with an ended ctx = %v, want ErrNotObtained and context.Canceled", err)
	}
}

// An ACL user who may not read the key gets the masters' refusals, not a
// wrong answer.
func TestInspectByAnACLUserWithoutTheKey(t *testing.T) {
	r := startReal(t, 3)
	c, err := New(r.aclClients("narrow", "~other:*", "~redlock:memory", "+@all"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Inspect(bg, "k")
	if !errors.Is(err, ErrNotObtained) || in.Answered != 0 || len(in.Failed) != 3 {
		t.Fatalf("Inspect of a key the user may not read = %+v, %v; want 3 failures and ErrNotObtained", in, err)
	}
}

func TestInspectRejectsBadInput(t *testing.T) {
	r := startReal(t, 3)
	c := r.client()
	//nolint:staticcheck // a nil ctx is the bad input under test
	if _, err := c.Inspect(nil, "k"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Inspect(nil ctx) = %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Inspect(bg, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Inspect of an empty key = %v, want ErrInvalidArgument", err)
	}
	var l *Lock
	if held, err := l.Held(bg); held || err != nil {
		t.Fatalf("Held of a nil *Lock = %v, %v; want false, nil", held, err)
	}
	_ = c.Close()
	if _, err := c.Inspect(bg, "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Inspect after Close = %v, want ErrClosed", err)
	}
}
