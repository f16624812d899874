package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/script"
)

// The restart guard and the minimal ACL, on real Redis 7 masters: the guard
// is on or explicitly off, never off in silence (G5), and every key a
// script touches is one the minimal ACL names.

// aclLockKeysOnly is the usual way to scope an application's user: its
// keys and the scripts' commands, but not the guard's marker.
var aclLockKeysOnly = []string{"~lk:*", "+evalsha", "+eval", "+set", "+get", "+mget", "+del", "+pexpire", "+pttl", "+time"}

// A user whose key pattern covers only the lock keys cannot run the guard:
// New says so, naming the right and both remedies, instead of a Client
// whose guard counts every vote as if there were none.
func TestNewRefusesAGuardWithoutItsMarker(t *testing.T) {
	r := startReal(t, 5)
	for _, tc := range []struct {
		name  string
		rules []string
		says  string
	}{
		{"without the marker key", aclLockKeysOnly, "NOPERM"},
		{"without TIME", append([]string{"~redlock:memory"}, aclLockKeysOnly[:len(aclLockKeysOnly)-1]...), "can't run this command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(r.aclClients("app", tc.rules...), WithoutNotices())
			if err == nil {
				_ = c.Close()
				t.Fatal("New with a user the guard cannot work for returned a Client")
			}
			if !errors.Is(err, ErrGuardRights) {
				t.Fatalf("New = %v, want ErrGuardRights", err)
			}
			for _, want := range []string{tc.says, "~redlock:memory", "+time", "WithRestartGuard(0)"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New's error does not say %q: %v", want, err)
				}
			}
		})
	}
}

// With the guard turned off explicitly, the lock keys are all the user
// needs, and no script touches anything else (the ACL log stays empty).
func TestWithoutTheGuardTheLockKeysAreEnough(t *testing.T) {
	r := startReal(t, 5)
	exerciseEveryCallAs(t, r.aclClients("app", aclLockKeysOnly...), WithoutNotices(), WithRestartGuard(0))
	noACLRefusals(t, r)
}

// A master whose marker cannot be read or written at vote time (rights
// revoked after New, or the marker replaced by a value of another type)
// casts no vote at all: the lock is not obtained, with the server's error,
// and no key is left. A vote counted without the guard would let a second
// holder in after a restart.
func TestAVoteWhoseMarkerIsRefusedIsNoVote(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(a *redis.Client) error
		says  string
	}{
		{"marker key revoked", func(a *redis.Client) error { return a.Do(bg, "ACL", "SETUSER", "app", "resetkeys", "~lk:*").Err() }, "NOPERM"},
		{"TIME revoked", func(a *redis.Client) error { return a.Do(bg, "ACL", "SETUSER", "app", "-time").Err() }, "can't run this command"},
		{"marker of another type", func(a *redis.Client) error {
			if err := a.Del(bg, script.PlainMarkerKey).Err(); err != nil {
				return err
			}
			return a.HSet(bg, script.PlainMarkerKey, "f", "v").Err()
		}, "WRONGTYPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startReal(t, 5)
			c, err := New(r.aclClients("app", aclWithoutNotices...), WithoutNotices())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i, a := range r.admin {
				if err := tc.spoil(a); err != nil {
					t.Fatalf("node %d: %v", i, err)
				}
			}
			l, err := c.TryLock(bg, "lk:a", 10*time.Second)
			if err == nil {
				_ = l.Unlock(bg)
				t.Fatal("TryLock counted votes whose marker it could not read")
			}
			if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("TryLock = %v, want ErrNotObtained with the masters' %s", err, tc.says)
			}
			for i, a := range r.admin {
				if n, err := a.Exists(bg, "lk:a").Result(); err != nil || n != 0 {
					t.Fatalf("node %d: lk:a exists (%d, %v) after a script that could not read the marker", i, n, err)
				}
			}
		})
	}
}

// Every script, under exactly the README's minimal ACL with notices: plain
// and multi-key locks, Extend, Fence, Inspect, Resume, a contended Lock
// (hand-offs, wanted keys) and Do. Redis checks each script's declared keys
// before it runs, and every call inside it; a refused access, even one a
// script swallows with pcall, lands in the ACL log, which must stay empty.
func TestEveryScriptStaysWithinTheMinimalACL(t *testing.T) {
	r := startReal(t, 5)
	rules := append(append([]string(nil), aclWithNotices...), "+incr")
	clients := r.aclClients("app", rules...)
	c, err := New(clients, WithRetryDelay(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := New(r.aclClients("app", rules...), WithRetryDelay(10*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	exerciseEveryCall(t, c, "lk:a", scaled(2*time.Second))

	l, err := c.TryLock(bg, "lk:b", 10*time.Second)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if _, err := other.TryLock(bg, "lk:b", 10*time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Client's TryLock of a held key = %v", err) // marks its wanted key
	}
	if _, err := l.Fence(bg); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if in, err := c.Inspect(bg, "lk:b"); err != nil || in.HoldingFor(l.Token()) < c.quorum { // TryLock returns at a majority
		t.Fatalf("Inspect: HoldingFor = %d, %v; want a majority", in.HoldingFor(l.Token()), err)
	}
	resumed, err := other.Resume(bg, "lk:b", l.Token(), 10*time.Second)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	ctx, cancel := context.WithTimeout(bg, scaled(10*time.Second))
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		w, err := other.Lock(ctx, "lk:b", 10*time.Second)
		if err == nil {
			err = w.Unlock(bg)
		}
		waited <- err
	}()
	if err := resumed.Unlock(bg); err != nil {
		t.Fatalf("Unlock of the resumed lock: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the other Client's waiter: %v", err)
	}

	m, err := c.TryLockMulti(bg, []string{"lk:m1", "lk:m2"}, 10*time.Second)
	if err != nil {
		t.Fatalf("TryLockMulti: %v", err)
	}
	if _, err := other.TryLockMulti(bg, []string{"lk:m2", "lk:m3"}, 10*time.Second); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Client's TryLockMulti of a held key = %v", err)
	}
	if err := m.Extend(bg, 20*time.Second); err != nil {
		t.Fatalf("Extend of a multi-key lock: %v", err)
	}
	if _, err := m.Fence(bg); err != nil {
		t.Fatalf("Fence of a multi-key lock: %v", err)
	}
	if err := m.Unlock(bg); err != nil {
		t.Fatalf("Unlock of a multi-key lock: %v", err)
	}
	settle(c)
	settle(other)
	noACLRefusals(t, r)
}

// noACLRefusals fails the test if any master's ACL log has an entry: a key,
// command or channel refused to the user. New's INFO, sent outside any
// script to tell the masters apart, is optional (New's doc) and not in the
// minimal ACL.
func noACLRefusals(t *testing.T, r *realNodes) {
	t.Helper()
	for i, a := range r.admin {
		entries, err := a.ACLLog(bg, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Reason == "command" && e.Object == "info" && e.Context == "toplevel" {
				continue
			}
			t.Errorf("node %d refused %s %q %d times (%s)", i, e.Reason, e.Object, e.Count, fmt.Sprint(e.Context))
		}
	}
}
