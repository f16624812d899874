// The errors callers branch on, and the per-node detail types.

package redlock

import (
	"github.com/redlock-go/redlock/internal/engine"
)

// Outcomes callers branch on with errors.Is.
var (
	// ErrNotObtained reports that a lock, or an extension of one, could not
	// be obtained: the key is held by someone else, or a majority of the
	// nodes could not be reached in time, or reaching them used up the
	// validity.
	ErrNotObtained = engine.ErrNotObtained

	// ErrNotHeld reports that an operation on a Lock found it no longer
	// held: its validity had ended, it was already released, or fewer than
	// a majority of the nodes still held its token. A critical section that
	// ends with ErrNotHeld may have overlapped another holder's.
	ErrNotHeld = engine.ErrNotHeld

	// ErrInvalidArgument reports bad input: no nodes, a nil or repeated
	// node, an empty key or one named like the library's own keys, a TTL
	// too short to leave any validity, or an option out of range. The
	// message says which.
	ErrInvalidArgument = engine.ErrInvalidArgument

	// ErrClosed reports an operation on a Client after Close.
	ErrClosed = engine.ErrClosed

	// ErrLockLost reports, from Do, that the lock stopped being trustworthy
	// while fn ran: an extension was refused, or the validity ended before
	// one succeeded. fn's context was cancelled at that moment, and its
	// work may have overlapped another holder's.
	ErrLockLost = engine.ErrLockLost
)

// Per-node outcomes, found inside a *QuorumError with errors.Is.
var (
	// ErrNodeTimeout reports that a node did not answer before its
	// deadline (see WithNodeTimeout). Its command may still take effect.
	ErrNodeTimeout = engine.ErrNodeTimeout

	// ErrNodeRefused reports that a node answered no: when locking, the key
	// held another token; when extending or unlocking, it no longer held
	// ours.
	ErrNodeRefused = engine.ErrNodeRefused

	// ErrNodeQuarantined reports that a node said yes but its vote was not
	// counted: its memory is younger than the restart guard, and either
	// another master answered with a memory older than its own, so it may
	// have lost (in a restart without persistence, a flush) a key another
	// holder still counts on, or too few masters reported their memory
	// before the round ended to tell. The NodeError's message says which.
	// Its key is set all the same. See WithRestartGuard.
	ErrNodeQuarantined = engine.ErrNodeQuarantined

	// ErrGuardRights reports, from New, that the restart guard cannot work
	// with the Client's credentials on a master: reading or writing its
	// memory marker, or reading the master's clock (TIME), was refused.
	// The message names the master, the right and both remedies: grant it,
	// or turn the guard off with WithRestartGuard(0) to accept the risk.
	ErrGuardRights = engine.ErrGuardRights

	// ErrEvictionPolicy reports, from New, that a master's maxmemory-policy
	// may evict lock keys: maxmemory is set and the policy is not
	// noeviction. The message names the master, its policy, and both
	// remedies: CONFIG SET maxmemory-policy noeviction, or
	// WithEvictingMasters to accept the risk. A master that refuses INFO is
	// not checked.
	ErrEvictionPolicy = engine.ErrEvictionPolicy
)

// A NodeError is what went wrong on one node during one operation.
//
// Its fields:
//
//	Node    int // index of the node in the slice given to New
//	Addr    string // the node's address, or "node[i]" when the client does not expose one
//	Latency time.Duration // from the first request of the operation to the answer or the deadline
//	Err     error // ErrNodeTimeout, ErrNodeRefused, the caller's ctx.Err(), or the driver's error
type NodeError = engine.NodeError

// A QuorumError reports an operation that did not get a majority of the
// nodes, with the outcome of every node that did not vote yes.
//
// errors.Is matches a QuorumError against the outcome it stands for
// (ErrNotObtained or ErrNotHeld) and against each node's error, so
// errors.Is(err, ErrNodeTimeout) tells whether any node timed out.
//
// Its fields:
//
//	// Op is the operation: "lock" (TryLock, Lock, TryLockMulti, LockMulti,
//	// Do, DoMulti), "extend", "unlock", "fence", "resume" or "inspect".
//	Op      string
//	Key     string // the lock's key
//	Quorum  int // yes votes needed: a majority of the nodes
//	Votes   int // yes votes received before the outcome was decided
//	Elapsed time.Duration // from the first request to the decision
//	// Nodes holds one entry per node that voted no or failed before the
//	// outcome was decided; nodes that had not answered yet are absent.
//	Nodes []*NodeError
type QuorumError = engine.QuorumError
