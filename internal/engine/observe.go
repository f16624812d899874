// Observability: the Observer hook, its events, and how the Client emits
// them. The logger (log.go) and the OpenTelemetry module (otel/) are built
// on it.

package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// An Observer receives what a Client does, as it happens: rounds and their
// per-master outcomes, masters starting to fail and recovering, locks
// obtained, released, extended and lost. Give one to New with WithObserver;
// set only the fields you need. A nil field costs nothing, and a Client
// without an Observer (or with a zero one) pays one nil check per event
// site: no allocation, no lock.
//
// The functions are called synchronously, from the goroutines of the
// Client and of its callers, often concurrently: they must be safe for
// concurrent use, must return quickly, and must not call the Client.
// NodeReply and NodeState run on the path of the master's vote, before the
// round counts it: time spent there is that master's latency, and can
// make it miss its node deadline. Hand slow work (exporting, I/O) to
// another goroutine.
//
// Every event carries Key, the lock's key as the caller gave it. Keys can
// carry user data ("invoice:42"): record KeyHash(Key) rather than the key
// where it leaves the process, unless the user opted in, and never use a
// key as a metric label (its cardinality is unbounded). No event carries a
// lock's token: a token is a capability (see Lock.Token).
//
// Operations have one name each, in snake case, wherever they appear:
// events, logs, the OpenTelemetry module and QuorumError.Op. A call's op
// (Start, AcquireEvent) is its method's name: "try_lock", "lock",
// "try_lock_multi", "lock_multi", "do", "do_multi", "extend", "unlock" or
// "resume". A round's op (RoundEvent, NodeReplyEvent, QuarantineEvent,
// QuorumError) is what the round does: "lock", "extend", "unlock", "fence",
// "resume", "inspect", "hand_off" or "confirm". A call and a round of the
// same operation share the name: Extend makes "extend" rounds, Resume
// "resume" rounds, and the other acquisitions ("try_lock", "lock",
// "try_lock_multi", "lock_multi", and Do's and DoMulti's) "lock" rounds.
type Observer struct {
	// Start is called as TryLock, Lock, Do, Extend and Unlock begin, and
	// the calls made of them (TryLockMulti, LockMulti, DoMulti, Resume);
	// op is the call's (see above), and for a multi-key call key is its
	// keys joined by commas, as in Lock.Key. The context it returns is the
	// one the call then works with, and the one its events carry
	// in Ctx, so that a tracer can start a span here and end it in the
	// call's last event (Acquire, Extend, Release or DoEnd). It must return
	// ctx or a context derived from it.
	Start func(ctx context.Context, op, key string) context.Context

	// Round is called once per round, as soon as it is decided: every lock
	// attempt, extension, release and hand-off.
	Round func(RoundEvent)

	// NodeReply is called for every request's outcome on one master as it
	// comes in, including replies that arrive after their round was
	// decided. A request that was never sent (its round was decided first)
	// has none.
	NodeReply func(NodeReplyEvent)

	// NodeState is called when a master starts failing (a timeout or an
	// error where an answer was due) and when it answers again:
	// transitions only, not every call. A request still outstanding at its
	// node deadline is a timeout even if its caller left before; one the
	// caller's ctx ended earlier (a driver with ContextTimeoutEnabled ends
	// requests with ctx) says nothing, so a hung master is reported by the
	// next call that waits for it, a lock's Unlock or Extend for instance.
	NodeState func(NodeStateEvent)

	// Acquire is called as TryLock and Lock return (Do's acquisition is a
	// Lock).
	Acquire func(AcquireEvent)

	// Extend is called as Extend returns, Do's own extensions included.
	Extend func(ExtendEvent)

	// Release is called as Unlock returns.
	Release func(ReleaseEvent)

	// DoEnd is called as Do returns. A lock lost while fn ran is reported
	// in Lost.
	DoEnd func(DoEvent)

	// Quarantine is called when a master's yes vote was not counted by the
	// restart guard (WithRestartGuard) after it was counted before:
	// transitions into quarantine only.
	Quarantine func(QuarantineEvent)

	// NoticesDegraded is called when a master refuses the library's
	// notices (a Redis 7 ACL user without channel rights): waiters of
	// other Clients on it fall back to polling. At most once per master
	// per minute, while it keeps refusing.
	NoticesDegraded func(NoticesDegradedEvent)

	// Notice is called for every notice this Client receives about a key
	// it watches (its waiters' keys).
	Notice func(NoticeEvent)
}

// A RoundEvent is one decided round.
type RoundEvent struct {
	Ctx context.Context
	// Op is the round's operation: "lock", "extend", "unlock", "fence" or
	// "resume", as in QuorumError; "hand_off" (Unlock handing the lock to a
	// waiter); "confirm" (a Lock waiting on another Client's hand-off
	// checking with an extension round that the key is its own: after a
	// long wait, or when it missed the hand-off's notices).
	Op      string
	Key     string
	Votes   int           // yes votes counted when it was decided
	Quorum  int           // yes votes needed
	Elapsed time.Duration // from the first request to the decision
	// Nodes holds every master's part in the round, indexed like the
	// nodes given to New.
	Nodes []NodeResult
}

// Won reports whether the round got a majority (its caller may still find
// no validity left).
func (e RoundEvent) Won() bool { return e.Votes >= e.Quorum }

// A NodeResult is one master's part in a round, as of its decision.
type NodeResult struct {
	Node    int    // index in the nodes given to New
	Addr    string // as in NodeError
	Outcome NodeOutcome
	Latency time.Duration // to the answer, or to the decision for NodePending
	Err     error         // for NodeTimeout, NodeFailed, NodeCanceled and NodeQuarantined
}

// A NodeOutcome is how one master answered one request.
type NodeOutcome int

// How a master answered, in NodeResult and NodeReplyEvent.
const (
	NodePending     NodeOutcome = iota // not answered when the round was decided (or skipped)
	NodeYes                            // voted yes
	NodeRefused                        // voted no: the key held another token (ErrNodeRefused)
	NodeTimeout                        // missed its deadline (ErrNodeTimeout)
	NodeFailed                         // failed: refused connection, an error reply, a broken script
	NodeCanceled                       // the caller's ctx, or the lock's validity end, cut the request short before its node deadline: says nothing of the master
	NodeQuarantined                    // said yes, not counted (ErrNodeQuarantined)
)

var nodeOutcomeNames = [...]string{"pending", "yes", "refused", "timeout", "failed", "canceled", "quarantined"}

// String returns the outcome's name less its Node prefix, in lower case
// ("yes", "timeout", "failed"), as events, logs and the OpenTelemetry
// module record it; "unknown" for a value out of range.
func (o NodeOutcome) String() string {
	if o < 0 || int(o) >= len(nodeOutcomeNames) {
		return "unknown"
	}
	return nodeOutcomeNames[o]
}

// A NodeReplyEvent is one request's outcome on one master.
type NodeReplyEvent struct {
	Ctx     context.Context
	Op      string // the round's: as in RoundEvent
	Key     string
	Node    int
	Addr    string
	Outcome NodeOutcome // NodeYes, NodeRefused, NodeTimeout, NodeFailed or NodeCanceled
	Latency time.Duration
	Err     error
}

// A NodeStateEvent is a master starting to fail, or answering again: a
// yes to anything but a release, or a lock attempt's refusal (a master at
// maxmemory refuses every grant, yet deletes, and answers "not ours" to
// the releases, extensions and fences of locks it never got).
type NodeStateEvent struct {
	Node    int
	Addr    string
	Healthy bool        // false: it started failing
	Outcome NodeOutcome // what changed it: NodeTimeout or NodeFailed when failing; NodeYes or NodeRefused when healthy again
	Err     error       // the failure, when not Healthy
}

// An AcquireOutcome is how TryLock or Lock ended.
type AcquireOutcome int

// How TryLock or Lock ended, in AcquireEvent.
const (
	AcquireObtained            AcquireOutcome = iota // the lock is held
	AcquireContended                                 // another token held the key (on at least one master that refused)
	AcquireMajorityUnreachable                       // masters failed, timed out or were quarantined, and none refused, or too many for a majority
	AcquireCtxEnded                                  // the caller's ctx ended first (and nothing above says more)
	AcquireFailed                                    // bad input, a closed Client, no validity left
)

var acquireOutcomeNames = [...]string{"obtained", "contended", "majority_unreachable", "ctx_ended", "failed"}

// String returns the outcome's name less its Acquire prefix, in snake case
// ("obtained", "majority_unreachable"), as events, logs and the
// OpenTelemetry module record it; "unknown" for a value out of range.
func (o AcquireOutcome) String() string {
	if o < 0 || int(o) >= len(acquireOutcomeNames) {
		return "unknown"
	}
	return acquireOutcomeNames[o]
}

// An AcquireEvent is TryLock or Lock returning.
type AcquireEvent struct {
	Ctx     context.Context
	Op      string // "try_lock", "lock", "try_lock_multi", "lock_multi" or "resume"
	Key     string
	Wait    time.Duration // from the call to its return
	Outcome AcquireOutcome
	Err     error // nil when AcquireObtained
}

// An ExtendEvent is Extend returning.
type ExtendEvent struct {
	Ctx context.Context
	Key string
	TTL time.Duration
	Err error // errors.Is(Err, ErrNotHeld): refused, the lock is lost
}

// A ReleaseEvent is Unlock returning.
type ReleaseEvent struct {
	Ctx       context.Context
	Key       string
	Held      time.Duration // from the lock's acquisition to the release
	HandedOff bool          // the lock went straight to a waiter
	Remote    bool          // that waiter was another Client's
	Err       error
}

// A DoEvent is Do returning.
type DoEvent struct {
	Ctx  context.Context
	Key  string
	Held time.Duration // 0 when the lock was not obtained
	Lost error         // matches ErrLockLost when the lock was lost while fn ran
	Err  error         // what Do returned
}

// A QuarantineEvent is a master's yes vote held back by the restart guard.
type QuarantineEvent struct {
	Ctx  context.Context
	Op   string
	Key  string
	Node int
	Addr string
}

// A NoticesDegradedEvent is a master refusing notices.
type NoticesDegradedEvent struct {
	Node int
	Addr string
	Err  error // the refusal, when the driver reported one
}

// A NoticeEvent is one notice received.
type NoticeEvent struct {
	Key  string
	Node int
	Kind string // "acquired", "released", "handed" or "wanted"
	Own  bool   // about this Client: its own lock taken or released, a hand-off to it, its want
}

// KeyHash is a stable short hash of a lock key (the first 8 bytes of its
// SHA-256, in hex): what the logger and the OpenTelemetry module record
// instead of the key unless told otherwise.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// WithObserver adds o to the Client's observers. It may be given more than
// once (WithLogger adds one too): each gets every event, in the order
// given. A zero Observer is ignored.
func WithObserver(o Observer) Option {
	return func(cfg *config) error {
		if o.zero() {
			return nil
		}
		if cfg.obs == nil {
			cfg.obs = &o
			return nil
		}
		j := joinObservers(*cfg.obs, o)
		cfg.obs = &j
		return nil
	}
}

// zero reports whether o has no function set.
func (o Observer) zero() bool {
	return o.Start == nil && o.Round == nil && o.NodeReply == nil && o.NodeState == nil &&
		o.Acquire == nil && o.Extend == nil && o.Release == nil && o.DoEnd == nil &&
		o.Quarantine == nil && o.NoticesDegraded == nil && o.Notice == nil
}

// joinObservers returns an Observer that calls a's functions, then b's.
func joinObservers(a, b Observer) Observer {
	return Observer{
		Start: func(ctx context.Context, op, key string) context.Context {
			if a.Start != nil {
				ctx = a.Start(ctx, op, key)
			}
			if b.Start != nil {
				ctx = b.Start(ctx, op, key)
			}
			return ctx
		},
		Round:           join(a.Round, b.Round),
		NodeReply:       join(a.NodeReply, b.NodeReply),
		NodeState:       join(a.NodeState, b.NodeState),
		Acquire:         join(a.Acquire, b.Acquire),
		Extend:          join(a.Extend, b.Extend),
		Release:         join(a.Release, b.Release),
		DoEnd:           join(a.DoEnd, b.DoEnd),
		Quarantine:      join(a.Quarantine, b.Quarantine),
		NoticesDegraded: join(a.NoticesDegraded, b.NoticesDegraded),
		Notice:          join(a.Notice, b.Notice),
	}
}

func join[E any](a, b func(E)) func(E) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(e E) { a(e); b(e) }
}
