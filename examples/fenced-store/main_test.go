// Tests of the example: the scenario against a store that checks fences and
// against one that does not, the store's rules one by one, and the
// program's narrative.

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

// newHolders returns two Clients, each with its own connections, on five
// fresh embedded masters.
func newHolders(t *testing.T) (a, b *redlock.Client) {
	t.Helper()
	addrs := redlocktest.Start(t, 5).Addrs()
	a, closeA, err := newClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeA)
	b, closeB, err := newClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeB)
	return a, b
}

// playT plays the scenario against store and checks what both runs must
// show: B obtained the lock only after A's validity ended, and with a
// higher fence.
func playT(t *testing.T, store *Store) outcome {
	t.Helper()
	a, b := newHolders(t)
	var out bytes.Buffer
	o, err := play(context.Background(), a, b, store, &out)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("timeline:\n%s", out.String())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !o.lockedB.After(o.untilA) {
		t.Errorf("B obtained the lock at %v, before A's validity ended at %v", o.lockedB, o.untilA)
	}
	if o.fenceA == 0 || o.fenceB <= o.fenceA {
		t.Errorf("fences: A %d, B %d; want 0 < A < B", o.fenceA, o.fenceB)
	}
	return o
}

func TestFencedStoreRejectsTheStaleWrite(t *testing.T) {
	o := playT(t, NewStore())
	if !errors.Is(o.lateWrite, ErrStaleFence) {
		t.Errorf("A's late write with fence %d got %v, want ErrStaleFence", o.fenceA, o.lateWrite)
	}
	if o.final != valueB || o.finalFence != o.fenceB {
		t.Errorf("store holds %q with fence %d, want B's %q with fence %d", o.final, o.finalFence, valueB, o.fenceB)
	}
}

// TestUncheckedStoreLosesTheUpdate is the control: the same story without
// the store's check ends in a lost update, so the test above can fail.
func TestUncheckedStoreLosesTheUpdate(t *testing.T) {
	o := playT(t, NewUncheckedStore())
	if o.lateWrite != nil {
		t.Errorf("A's late write to a store that does not check fences: %v", o.lateWrite)
	}
	if o.final != valueA {
		t.Errorf("store holds %q, want A's stale %q over B's", o.final, valueA)
	}
}

func TestStoreRules(t *testing.T) {
	steps := []struct {
		writer string
		fence  uint64
		stale  bool // refused by a store that checks fences
	}{
		{"w1", 0, true},  // no fence
		{"w1", 5, false}, // the first fence
		{"w1", 5, false}, // the same writer, again
		{"w2", 5, true},  // the same fence from another writer
		{"w2", 4, true},  // lower
		{"w2", 6, false}, // higher
		{"w1", 5, true},  // the old writer, now stale
	}
	checked, unchecked := NewStore(), NewUncheckedStore()
	for i, s := range steps {
		value := fmt.Sprintf("%s at step %d", s.writer, i)
		err := checked.Write("x", value, s.writer, s.fence)
		if got := errors.Is(err, ErrStaleFence); got != s.stale || (err != nil && !got) {
			t.Errorf("step %d: %s with fence %d: checking store says %v, want stale %v", i, s.writer, s.fence, err, s.stale)
		}
		if err := unchecked.Write("x", value, s.writer, s.fence); err != nil {
			t.Errorf("step %d: unchecked store refused: %v", i, err)
		}
	}
	if v, f, _ := checked.Read("x"); v != "w2 at step 5" || f != 6 {
		t.Errorf("checking store holds %q at fence %d, want step 5's at fence 6", v, f)
	}
	if v, _, _ := unchecked.Read("x"); v != "w1 at step 6" {
		t.Errorf("unchecked store holds %q, want the last write", v)
	}
	if _, _, ok := checked.Read("y"); ok {
		t.Error("an item never written reads as present")
	}
}

func TestProgramTellsTheStory(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"A's validity ends (Done is closed",
		"REJECTS A's write: stale fence",
		`the store keeps "written by B"`,
		"A's stale write (fence ",
		") was rejected",
		"accepts A's write: it overwrites B's",
		"B's update is LOST",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(out.String())
	}
}
