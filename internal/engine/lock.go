// A held lock: its validity, its end, and what Extend and Unlock share.

package engine

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/script"
)

// A Lock is a lock obtained by TryLock or Lock. It is safe for concurrent
// use. Its methods do not panic on a nil or zero *Lock: Extend and Unlock
// report ErrNotHeld, Done is closed, and Key, Token and Until are empty.
//
// A Lock prints (fmt, with any verb; log/slog, with any handler) as its
// key or keys, its number of masters, its Until and its state, never its
// token: Token is the only way to the token.
type Lock struct {
	c        *Client
	lockID           // what it is a lock on, and by which token: fixed
	holds    []*hold // per node, indexed like c.nodes
	acquired         // how it was taken: written before the Lock is handed out
	mu       sync.Mutex
	life     // its validity and its end: guarded by mu
	fencing  // its fencing token
}

// A lockID is what a Lock is a lock on, and by which token. It never
// changes.
type lockID struct {
	key   string   // the key; for a multi-key lock, its keys joined by commas (for messages)
	keys  []string // a multi-key lock's keys (multi.go); nil for one key
	token string
}

// acquired is how a Lock was taken. Its fields are written before the Lock
// is handed out, but for yeses, counted by the acquisition's late answers.
type acquired struct {
	// quiet: the acquisition announced nothing (no waiter of the Client
	// watched the key), so nobody heard it taken; its release is announced
	// only where a waiter of another Client marked the key since
	// (internal/script/lua/release.lua).
	quiet bool
	// widens: Extend may ask masters to take the key (quorumfirst.go): the
	// acquisition left some unasked, or a hand-off from another Client may
	// have left some free. Unlock ends that (giveUpReserves).
	widens bool
	// yeses counts the masters that said yes to the acquisition round,
	// its late answers included: once a majority did, a failed attempt's
	// clean-up is announced (releaseNode).
	yeses    atomic.Int32
	obtained time.Time // when it was known held, for the observers' hold time
}

// life is a Lock's validity and its end, guarded by the Lock's mu. Until
// only moves forward while the lock lives (Extend); done is closed once,
// when until passes or Unlock begins, and ended says so.
type life struct {
	ttl      time.Duration // of the last successful acquisition or extension
	shortest time.Duration // the shortest TTL a script of ours set or extended the key with (trustedHandOff)
	until    time.Time
	released bool
	givenUp  bool          // Extend found the lock lost and released its keys
	unlocked chan struct{} // made as Unlock begins, closed once its rounds are decided
	done     chan struct{} // closed when the validity ends or Unlock is called
	ended    bool          // done is closed
	timer    *time.Timer   // runs expire at until
	pass     func()        // hands the Client's turn for key to its next waiter
}

// fencing is a Lock's fencing token: drawn once, by one Fence at a time.
type fencing struct {
	fenceGate chan struct{} // one Fence at a time; made by the first
	fence     uint64        // once drawn; 0 before
}

// Done returns a channel that is closed when the lock can no longer be
// trusted: its validity ended (Until passed without a successful Extend), an
// Extend found it lost, or Unlock was called. Select on it next to the work
// the lock protects. For a nil *Lock it returns a closed channel.
func (l *Lock) Done() <-chan struct{} {
	if l == nil || l.done == nil {
		return closedChan
	}
	return l.done
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// expire runs at Until: it ends the lock unless an extension moved Until.
func (l *Lock) expire() {
	l.mu.Lock()
	if !l.ended {
		if d := time.Until(l.until); d > 0 {
			l.timer.Reset(d)
			l.mu.Unlock()
			return
		}
	}
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
}

// endLocked closes done once. Called with l.mu held.
func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	close(l.done)
	l.timer.Stop()
}

// takePass returns the turn-passing function, once. Called with l.mu held.
func (l *Lock) takePass() func() {
	p := l.pass
	l.pass = nil
	if p == nil {
		return func() {}
	}
	return p
}

// passTurnAtEnd makes the lock hand the Client's turn for its key to the
// next local waiter when it is released or its validity ends.
func (l *Lock) passTurnAtEnd(pass func()) {
	l.mu.Lock()
	if l.ended && !l.released {
		l.mu.Unlock()
		pass() // the validity already ended
		return
	}
	l.pass = pass
	l.mu.Unlock()
}

// letGo reports whether this Client let the lock go: Unlock released it,
// or Extend found it lost and released its keys. Its token is then nobody's,
// and a late hand-off or a Close may delete it where it is left. A lock
// whose validity only ended here is not let go: Token and Resume may have
// passed it to another holder.
func (l *Lock) letGo() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released || l.givenUp
}

// heardOn records a notice that a hand-off put l's token on node i: live
// is false once l is let go (Unlock began, or Extend gave it up); covered,
// that l's Unlock, which has not begun, asks the node (hold.tokenSeen).
func (l *Lock) heardOn(i int) (live, covered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.givenUp {
		return false, false
	}
	return true, l.holds[i].tokenSeen()
}

// unlockDecided reports whether no round of this lock's Unlock is left
// undecided (none ran, or all are decided: a request not sent by then never
// is), and returns a channel closed once they are (nil when they are).
func (l *Lock) unlockDecided() (bool, <-chan struct{}) {
	l.mu.Lock()
	ch := l.unlocked
	l.mu.Unlock()
	if ch == nil {
		return true, nil
	}
	select {
	case <-ch:
		return true, nil
	default:
		return false, ch
	}
}

// ttlNow returns the TTL of the last acquisition or extension.
func (l *Lock) ttlNow() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Key returns the lock's key; "" for a nil *Lock. For a multi-key lock
// (TryLockMulti, LockMulti, DoMulti) it is the lock's name, its keys joined
// by commas in the order given ("a,b"): the Key its events, QuorumErrors
// and messages carry, so that they can be told apart and matched to it.
// That name is not a key on the masters, and cannot be split back (a key
// may hold a comma): give Keys to what takes keys. Inspect takes one key,
// and Resume resumes single-key locks only.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Keys returns the locked keys: the one key of a single-key lock, or a
// multi-key lock's in the order given; nil for a nil or zero *Lock. The
// slice is the caller's to change.
func (l *Lock) Keys() []string {
	if l == nil || l.key == "" { // nil, or a zero Lock
		return nil
	}
	if l.keys == nil {
		return []string{l.key}
	}
	return append([]string(nil), l.keys...)
}

// args returns the script arguments of a round on l's key or keys.
func (l *Lock) args(ttl time.Duration, announce script.Notice, guard bool) *roundArgs {
	a := newRoundArgs(l.key, l.token, ttl, announce, guard)
	if l.keys != nil {
		a.key, a.keyArg = l.keys[0], nil
		a.keys = make([]any, len(l.keys))
		for i, k := range l.keys {
			a.keys[i] = k
		}
		if announce.Channel != "" {
			a.channel = script.NoticePrefix // not used: release_multi.lua publishes on each key's channel (releaseCmd)
		}
	}
	return a
}

// Token returns the random token that identifies this holder on the nodes;
// "" for a nil *Lock.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// String describes the lock: its key (or a multi-key lock's keys), its
// number of masters, its Until and its state: "held" within Until,
// "expired" after it, "lost" once an Extend found it lost, "unlocked"
// once Unlock was called, and "not held" for a zero Lock. String never
// includes the lock's token. A nil *Lock is "<nil>".
func (l *Lock) String() string {
	if l == nil {
		return "<nil>"
	}
	until, state := l.printState()
	var b strings.Builder
	b.WriteString("redlock.Lock{")
	if l.keys != nil {
		b.WriteString("keys: [")
		for i, k := range l.keys {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Quote(k))
		}
		b.WriteString("]")
	} else {
		b.WriteString("key: " + strconv.Quote(l.key))
	}
	b.WriteString(", masters: " + strconv.Itoa(len(l.holds)))
	if !until.IsZero() {
		b.WriteString(", until: " + until.Format(time.RFC3339Nano))
	}
	b.WriteString(", state: " + state + "}")
	return b.String()
}

// Format prints the lock as String does, for every verb (%v, %+v, %#v,
// %s, %q, %x, ...): never its fields, so never its token.
func (l *Lock) Format(f fmt.State, verb rune) { formatSafe(f, verb, "*redlock.Lock", l.String()) }

// LogValue is the lock for log/slog: a group of its key ("key", or "keys"
// for a multi-key lock), "masters", "until" (absent for a zero Lock) and
// "state", as in String. It never includes the lock's token.
func (l *Lock) LogValue() slog.Value {
	if l == nil {
		return slog.StringValue("<nil>")
	}
	until, state := l.printState()
	attrs := make([]slog.Attr, 0, 4)
	if l.keys != nil {
		attrs = append(attrs, slog.Any("keys", append([]string(nil), l.keys...)))
	} else {
		attrs = append(attrs, slog.String("key", l.key))
	}
	attrs = append(attrs, slog.Int("masters", len(l.holds)))
	if !until.IsZero() {
		attrs = append(attrs, slog.Time("until", until))
	}
	return slog.GroupValue(append(attrs, slog.String("state", state))...)
}

// printState returns Until and the state String names.
func (l *Lock) printState() (time.Time, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.released:
		return l.until, "unlocked"
	case l.givenUp:
		return l.until, "lost"
	case l.c == nil:
		return l.until, "not held"
	case l.ended || !time.Now().Before(l.until):
		return l.until, "expired"
	}
	return l.until, "held"
}

// Until returns the end of the lock's validity on the local monotonic clock:
// until then, no other client can hold the lock as long as the nodes' clocks
// run at a rate within the drift factor of this one's. Compare it with
// time.Now(), not with a wall-clock time from elsewhere. After Unlock, or
// once the lock was found lost, Until is in the past. For a nil *Lock it is
// the zero time.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}
