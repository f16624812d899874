// Extend: making a held lock live longer (Redlock spec, step 6), and giving
// up a lock an extension found lost.

package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/core"
	"github.com/redlock-go/redlock/internal/script"
)

// Extend makes the lock live at least ttl from now on every node that still
// holds its token, in parallel (Redlock spec, step 6). It never shortens the
// keys: a ttl shorter than the validity left confirms that the lock is held
// and leaves the keys as they are. It succeeds when a majority answered
// before the current validity ended, and then moves Until to the start of
// the extension + ttl − drift, if that is later. An extension never
// brings back a lock that expired: its round must be decided while the
// validity lasts, and only a lock that may lack the key somewhere (taken
// with WithQuorumFirst, or handed over by another Client, whose hand-off
// leaves free masters free) asks masters to take it, under that deadline.
//
// Extend returns an error matching ErrNotHeld, and makes Until the past,
// when the lock was released, its validity had ended, or so many nodes said
// our token is gone that no majority holds it; the lock is then given up,
// and unless Unlock is already releasing it, Extend releases its keys in
// the background. It returns an error matching ErrNotObtained when a
// majority could not be reached for other reasons (timeouts, errors, ctx);
// Until is then unchanged and remains true: the lock may still be held
// until then, since no extension can have shortened it. Failures carry a
// *QuorumError. Bad input returns an error matching ErrInvalidArgument.
//
// Extend is safe to call concurrently with itself and with Unlock: Until
// only ever moves back when the lock ends.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: no lock", ErrNotHeld)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	o := l.c.cfg.obs
	if o == nil {
		return l.extend(ctx, ttl)
	}
	ctx = l.c.start(ctx, "extend", l.key)
	err := l.extend(ctx, ttl)
	if o.Extend != nil {
		o.Extend(ExtendEvent{Ctx: ctx, Key: l.key, TTL: ttl, Err: err})
	}
	return err
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return err
	}
	if err := c.enter(); err != nil {
		return err
	}
	defer c.bg.Done()
	until, err := l.heldUntil()
	if err != nil {
		// An earlier Extend that failed may have lengthened the keys all
		// the same: a lock whose validity ended is given up here too.
		l.giveUp(ttl)
		return err
	}
	if c.cfg.test.extending != nil {
		c.cfg.test.extending()
	}

	l.mu.Lock()
	l.shortest = min(l.shortest, ttl) // whether the round wins or not, its scripts record ttl
	l.mu.Unlock()
	start := time.Now()
	deadline := c.deadline(start, ttl).until(until) // a majority after the validity ended is too late
	guard := c.guard(ttl) > 0
	args := l.args(ttl, script.Notice{}, guard)
	lengthens := core.Widens(start, ttl, c.cfg.driftFactor, until) // I15
	skip, widen := l.extendSkips(lengthens)
	if guard && l.needsWitnesses() {
		for i, err := range skip {
			if errors.Is(err, ErrNodeRefused) {
				skip[i] = nil // asked below for its memory's report
			}
		}
	}
	er := &extendRound{l: l, guard: guard, args: args}
	if widen { // for the masters that may lack the key (quorumfirst.go)
		er.take = &acquireRound{l: l, ttl: ttl, args: newRoundArgs(l.key, l.token, ttl, script.Notice{}, guard), take: true}
	}
	r := c.fanOut(ctx, "extend", l.key, deadline, skip, ttl, er.on)
	return l.extended(ctx, r, start, ttl)
}

// An extendRound is one Extend's call on each master.
type extendRound struct {
	l     *Lock
	guard bool
	args  *roundArgs
	take  *acquireRound // not nil: the round may take the key where it is missing
}

// on extends the lock on master n. Where the key may be missing, it takes
// it, while the lock is valid (the round's deadline): a yes counts as a
// holder's for this extension's end, later than Until. A master that
// refused the lock is asked only for its memory's report, when the young
// votes may need it (I4): it repairs nothing (born 0), and a yes is our
// token's, found there.
func (er *extendRound) on(ctx context.Context, n *node) (ballot, error) {
	l := er.l
	h := l.holds[n.index]
	if er.take != nil && h.ask() {
		return er.take.call(ctx, n)
	}
	if err := h.await(ctx); err != nil {
		if !er.guard || !errors.Is(err, ErrNodeRefused) || !l.needsWitnesses() {
			return ballot{}, refusalAsVote(err)
		}
		b, err := n.extend(ctx, er.args, 0)
		if err == nil && b.yes {
			h.tokenSeen()
		}
		return b, err
	}
	b, err := n.extend(ctx, er.args, h.born.Load())
	if err == nil && b.yes {
		h.born.Store(b.mem.born) // a later repair is for a later loss only
		h.tokenSeen()            // Unlock asks it (narrowHanded)
	}
	return b, err
}

// needsWitnesses reports whether an extension round must also ask the
// masters that refused the lock, for their memory's report (the core's
// rule, core.NeedsWitnesses): known are the masters known to hold our key
// (a yes that reported its memory). Such a master sets nothing: no token
// of ours is there, and there is nothing to repair.
func (l *Lock) needsWitnesses() bool {
	refused, known := 0, 0
	for _, h := range l.holds {
		switch {
		case h.refused():
			refused++
		case h.born.Load() != 0:
			known++
		}
	}
	return core.NeedsWitnesses(refused, known, len(l.holds))
}

// extended applies an extension round r, started at start for ttl, to the
// lock: Until moves forward when it won in time; the lock is given up when
// it was lost; otherwise nothing changes. It returns Extend's error.
func (l *Lock) extended(ctx context.Context, r *round, start time.Time, ttl time.Duration) error {
	c := l.c
	l.mu.Lock()
	until, verdict := core.Extend(l.until, r.won(), r.refused, len(c.nodes), start, r.decided, ttl, c.cfg.driftFactor)
	switch {
	case !l.ended && verdict == core.Extended:
		// Every key of the majority now lives at least until start+ttl and
		// was never shortened, so the later of the two ends holds.
		if until.After(l.until) {
			l.ttl, l.until = ttl, until
			l.timer.Reset(time.Until(until))
		}
		l.mu.Unlock()
		return nil
	case !l.ended && verdict == core.Undecided: // the lock may still be held until Until
		l.mu.Unlock()
		return withCtx(ctx, r.error(ErrNotObtained))
	}
	// Lost: no majority holds our token, or the validity ended (this round
	// reached its end, or the expiry timer, Unlock or another Extend came
	// first). This round may have lengthened the keys all the same.
	if !l.ended {
		l.until = until
	}
	l.mu.Unlock()
	l.giveUp(ttl)
	return r.error(ErrNotHeld)
}

// giveUp ends a lock whose validity is over, if Unlock has not, and
// releases its keys once, since an extension may have lengthened them;
// unless Unlock is releasing them already. Unlock after it reports
// ErrNotHeld without contacting the nodes. The caller holds a registration
// (enter).
func (l *Lock) giveUp(ttl time.Duration) {
	l.mu.Lock()
	if l.released || l.givenUp || (!l.ended && time.Now().Before(l.until)) {
		l.mu.Unlock()
		return
	}
	l.givenUp = true
	l.endLocked()
	pass := l.takePass()
	l.mu.Unlock()
	pass()
	l.abandon(ttl)
}

// heldUntil returns the lock's validity end, or ErrNotHeld if the lock was
// released or its validity ended.
func (l *Lock) heldUntil() (time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return time.Time{}, fmt.Errorf("%w: %q was released", ErrNotHeld, l.key)
	}
	if !time.Now().Before(l.until) {
		return time.Time{}, fmt.Errorf("%w: validity of %q ended", ErrNotHeld, l.key)
	}
	return l.until, nil
}
