package core

import "time"

// WantFresh is how long a holder keeps a want it heard, since its last
// repetition (a waiter repeats it every second).
const WantFresh = 3 * time.Second

// lineMemory is how many finished tokens a Line remembers: enough for the
// late copies a paused master may still send.
const lineMemory = 64

// A Want is a waiter of another Client that asked for a key, as a holder's
// Line records it.
type Want struct {
	Client, Token string
	TTL           time.Duration
	At            time.Time // when its token was first heard: its place in line
	seen          time.Time // when it was last heard
	// deaf lists the masters whose notices the holder's Client may have
	// missed since the want was last heard; ndeaf counts them (W2).
	deaf  []bool
	ndeaf int
}

// hearFrom starts w's deaf list anew: the masters whose subscription subs
// (nil: none yet) has not confirmed, of n.
func (w *Want) hearFrom(subs []bool, n int) {
	w.deaf, w.ndeaf = w.deaf[:0], 0
	for i := range n {
		deaf := subs == nil || !subs[i]
		w.deaf = append(w.deaf, deaf)
		if deaf {
			w.ndeaf++
		}
	}
}

// Doubtful reports whether w may be over unheard: a quorum of the masters
// were deaf since it was last heard (W2).
func (w *Want) Doubtful(quorum int) bool { return w.ndeaf >= quorum }

// A Line is a holder's record of the wants other Clients' waiters
// announced for one key: who asked, in which order, and which tokens are
// over. It is what a hand-off to another Client decides by (W1–W4 in
// doc.go). The zero Line is empty and ready; it is not safe for concurrent
// use.
type Line struct {
	Wants []*Want
	done  [lineMemory]string // tokens whose want is over (withdrawn or served)
	next  int
}

// Heard records another Client's want heard at now, from n masters of
// which subs have confirmed the key's subscription: a new token takes
// that Client's place in line, a repetition keeps it (W3), ttl 0 withdraws
// it, only that token (W4). A want of a token that is over is a late copy
// (a master that was paused sends it after the withdrawal, sent to
// another): it is ignored (W1).
func (l *Line) Heard(client, token string, ttl time.Duration, now time.Time, subs []bool, n int) {
	if l.Finished(token) {
		return
	}
	if ttl == 0 {
		l.finish(token)
	}
	for i, w := range l.Wants {
		if w.Client != client {
			continue
		}
		if ttl > 0 && w.Token == token {
			w.seen = now
			w.hearFrom(subs, n)
			return
		}
		if ttl == 0 && w.Token != token {
			break // an older want's withdrawal: the Client's newer want stands (W4)
		}
		l.Wants = append(l.Wants[:i], l.Wants[i+1:]...)
		break
	}
	if ttl > 0 {
		w := &Want{Client: client, Token: token, TTL: ttl, At: now, seen: now}
		w.hearFrom(subs, n)
		l.Wants = append(l.Wants, w)
	}
}

// Deaf records that the holder's Client may have missed master's notices
// (its subscription there ended, or was confirmed again after a lost
// connection): among them, perhaps, those that a want was served (W2).
func (l *Line) Deaf(master int) {
	for _, w := range l.Wants {
		if master < len(w.deaf) && !w.deaf[master] {
			w.deaf[master] = true
			w.ndeaf++
		}
	}
}

// Served drops the want of token: it is over, a master handed it the key.
func (l *Line) Served(token string) {
	l.finish(token)
	for i, w := range l.Wants {
		if w.Token == token {
			l.Wants = append(l.Wants[:i], l.Wants[i+1:]...)
			return
		}
	}
}

// finish records that token's want is over.
func (l *Line) finish(token string) {
	if !l.Finished(token) {
		l.done[l.next] = token
		l.next = (l.next + 1) % len(l.done)
	}
}

// Finished reports whether token's want is over (withdrawn or served).
func (l *Line) Finished(token string) bool {
	for _, t := range l.done {
		if t == token {
			return true
		}
	}
	return false
}

// Fresh drops the wants not repeated for WantFresh as of now, and returns
// the rest.
func (l *Line) Fresh(now time.Time) []*Want {
	kept := l.Wants[:0]
	for _, w := range l.Wants {
		if now.Sub(w.seen) < WantFresh {
			kept = append(kept, w)
		}
	}
	clear(l.Wants[len(kept):])
	l.Wants = kept
	return kept
}

// Claim returns the fresh want that asked first, if it asked before since
// (a local waiter's arrival; zero: there is none), and records it served:
// the hand-off is its. A doubtful want is passed over (W2). nil: none.
func (l *Line) Claim(now, since time.Time, quorum int) *Want {
	var first *Want
	for _, w := range l.Fresh(now) {
		if w.Doubtful(quorum) {
			continue // it may have been served: handed again, nobody would hold its token
		}
		if first == nil || w.At.Before(first.At) {
			first = w
		}
	}
	if first == nil || (!since.IsZero() && !first.At.Before(since)) {
		return nil
	}
	l.Served(first.Token)
	return first
}

// Expected is a waiter's Client's record of the tokens its waiters
// announced for one key, and, for each, the masters that said they handed
// it the key. T is what the Client keeps with a token (its waiter's
// channel, the TTL asked for). A notice counts only for a token still
// expected, and each master once (W5). The zero Expected is empty and
// ready; it is not safe for concurrent use.
type Expected[T any] struct {
	m map[string]*handed[T]
}

type handed[T any] struct {
	masters []bool
	n       int
	val     T
}

// Expect starts counting, of n masters, those that hand the key to token.
func (e *Expected[T]) Expect(token string, n int, val T) {
	if e.m == nil {
		e.m = map[string]*handed[T]{}
	}
	e.m[token] = &handed[T]{masters: make([]bool, n), val: val}
}

// Unexpect stops counting for token, and returns which masters handed the
// key to it: nil when none did, or token was not expected.
func (e *Expected[T]) Unexpect(token string) (heard []bool) {
	h := e.m[token]
	delete(e.m, token)
	if h == nil || h.n == 0 {
		return nil
	}
	return h.masters
}

// From counts master's notice that it handed the key to token. expected
// reports whether token is expected; reached, whether the count reached
// quorum with this notice, and val is what Expect was given with it.
func (e *Expected[T]) From(token string, master, quorum int) (val T, expected, reached bool) {
	h := e.m[token]
	if h == nil {
		return val, false, false
	}
	if h.masters[master] {
		return h.val, true, false
	}
	h.masters[master] = true
	h.n++
	return h.val, true, h.n == quorum
}

// Count returns how many masters handed the key to token; 0 when token is
// not expected.
func (e *Expected[T]) Count(token string) int {
	if h := e.m[token]; h != nil {
		return h.n
	}
	return 0
}

// Len returns how many tokens are expected.
func (e *Expected[T]) Len() int { return len(e.m) }

// Drain returns every token still expected with what Expect was given
// with it, and forgets them all.
func (e *Expected[T]) Drain() map[string]T {
	out := make(map[string]T, len(e.m))
	for token, h := range e.m {
		out[token] = h.val
	}
	e.m = nil
	return out
}
