// The errors callers branch on, the per-node detail types, and the checks
// of a call's input that return ErrInvalidArgument.

package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redlock-go/redlock/internal/script"
)

// Outcomes callers branch on with errors.Is.
var (
	// ErrNotObtained reports that a lock, or an extension of one, could not
	// be obtained: the key is held by someone else, or a majority of the
	// nodes could not be reached in time, or reaching them used up the
	// validity.
	ErrNotObtained = errors.New("redlock: not obtained")

	// ErrNotHeld reports that an operation on a Lock found it no longer
	// held: its validity had ended, it was already released, or fewer than
	// a majority of the nodes still held its token. A critical section that
	// ends with ErrNotHeld may have overlapped another holder's.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrInvalidArgument reports bad input: no nodes, a nil or repeated
	// node, an empty key or one named like the library's own keys, a TTL
	// too short to leave any validity, or an option out of range. The
	// message says which.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// ErrClosed reports an operation on a Client after Close.
	ErrClosed = errors.New("redlock: client closed")

	// ErrLockLost reports, from Do, that the lock stopped being trustworthy
	// while fn ran: an extension was refused, or the validity ended before
	// one succeeded. fn's context was cancelled at that moment, and its
	// work may have overlapped another holder's.
	ErrLockLost = errors.New("redlock: lock lost")
)

// Per-node outcomes, found inside a *QuorumError with errors.Is.
var (
	// ErrNodeTimeout reports that a node did not answer before its
	// deadline (see WithNodeTimeout). Its command may still take effect.
	ErrNodeTimeout = errors.New("redlock: node timed out")

	// ErrNodeRefused reports that a node answered no: when locking, the key
	// held another token; when extending or unlocking, it no longer held
	// ours.
	ErrNodeRefused = errors.New("redlock: node refused")

	// ErrNodeQuarantined reports that a node said yes but its vote was not
	// counted: its memory is younger than the restart guard, and either
	// another master answered with a memory older than its own, so it may
	// have lost (in a restart without persistence, a flush) a key another
	// holder still counts on, or too few masters reported their memory
	// before the round ended to tell. The NodeError's message says which.
	// Its key is set all the same. See WithRestartGuard.
	ErrNodeQuarantined = errors.New("redlock: node quarantined by the restart guard")

	// ErrGuardRights reports, from New, that the restart guard cannot work
	// with the Client's credentials on a master: reading or writing its
	// memory marker, or reading the master's clock (TIME), was refused.
	// The message names the master, the right and both remedies: grant it,
	// or turn the guard off with WithRestartGuard(0) to accept the risk.
	ErrGuardRights = errors.New("redlock: the restart guard lacks a right")

	// ErrEvictionPolicy reports, from New, that a master's maxmemory-policy
	// may evict lock keys: maxmemory is set and the policy is not
	// noeviction. The message names the master, its policy, and both
	// remedies: CONFIG SET maxmemory-policy noeviction, or
	// WithEvictingMasters to accept the risk. A master that refuses INFO is
	// not checked.
	ErrEvictionPolicy = errors.New("redlock: a master may evict lock keys")
)

// errGivenUp is a node's outcome when its request was not sent because the
// round had been decided and the lock given up before its goroutine ran.
// The round's error never shows it: it is decided by then.
var errGivenUp = errors.New("redlock: node given up before the request was sent")

// A NodeError is what went wrong on one node during one operation.
type NodeError struct {
	Node    int           // index of the node in the slice given to New
	Addr    string        // the node's address, or "node[i]" when the client does not expose one
	Latency time.Duration // from the first request of the operation to the answer or the deadline
	Err     error         // ErrNodeTimeout, ErrNodeRefused, the caller's ctx.Err(), or the driver's error

	holder int64 // an acquisition's refusal: the holder's fingerprint (lua/acquire.lua); 0: not named
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("%s: %v after %v", e.Addr, e.Err, e.Latency.Round(10*time.Microsecond))
}

// Unwrap returns e.Err.
func (e *NodeError) Unwrap() error { return e.Err }

// A QuorumError reports an operation that did not get a majority of the
// nodes, with the outcome of every node that did not vote yes.
//
// errors.Is matches a QuorumError against the outcome it stands for
// (ErrNotObtained or ErrNotHeld) and against each node's error, so
// errors.Is(err, ErrNodeTimeout) tells whether any node timed out.
type QuorumError struct {
	// Op is the operation: "lock" (TryLock, Lock, TryLockMulti, LockMulti,
	// Do, DoMulti), "extend", "unlock", "fence", "resume" or "inspect".
	Op      string
	Key     string        // the lock's key
	Quorum  int           // yes votes needed: a majority of the nodes
	Votes   int           // yes votes received before the outcome was decided
	Elapsed time.Duration // from the first request to the decision
	// Nodes holds one entry per node that voted no or failed before the
	// outcome was decided; nodes that had not answered yet are absent.
	Nodes []*NodeError

	outcome error // ErrNotObtained or ErrNotHeld
	nodes   int   // how many nodes the Client has
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s %q: %d of %d votes", e.outcome, e.Op, e.Key, e.Votes, e.Quorum)
	if e.Votes >= e.Quorum {
		fmt.Fprintf(&b, ", but no validity left after %v", e.Elapsed.Round(10*time.Microsecond))
	}
	if len(e.Nodes) > 0 {
		b.WriteString(": ")
		b.WriteString(e.nodeErrors().Error())
	}
	return b.String()
}

// Unwrap returns the outcome sentinel and the per-node errors.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.outcome}
	if n := e.nodeErrors(); n != nil {
		errs = append(errs, n)
	}
	return errs
}

// nodeErrors collects the per-node errors, or returns nil when there are none.
func (e *QuorumError) nodeErrors() *multierror.Error {
	if len(e.Nodes) == 0 {
		return nil
	}
	m := &multierror.Error{ErrorFormat: func(errs []error) string {
		s := make([]string, len(errs))
		for i, err := range errs {
			s[i] = err.Error()
		}
		return strings.Join(s, "; ")
	}}
	for _, n := range e.Nodes {
		m = multierror.Append(m, n)
	}
	return m
}

// withCtx makes err match ctx.Err() as well when ctx has ended.
func withCtx(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("%w (%w)", err, ctxErr)
	}
	return err
}

// checkLock validates TryLock and Lock arguments and returns ttl rounded
// down to what Redis is told (whole milliseconds), so that validity is
// computed from the expiry the nodes really apply.
func (c *Client) checkLock(ctx context.Context, key string, ttl time.Duration) (time.Duration, error) {
	if ctx == nil {
		return 0, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if key == "" {
		return 0, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	return c.checkTTL(ttl)
}

// checkKey refuses a key named like the library's own keys, and, where a
// vote is a Redis Cluster, a key whose library keys cannot share its slot.
func (c *Client) checkKey(key string) error {
	if script.OwnKey(key) {
		return fmt.Errorf("%w: key %q is a name the library uses for its own keys (a memory marker, a fence counter or a wanted key)", ErrInvalidArgument, key)
	}
	if c.anyCluster && script.Slotless(key) {
		return fmt.Errorf("%w: key %q has a '}' but no hash tag, so on a Redis Cluster vote the library's keys for it "+
			"(memory marker, fence counter, wanted key) cannot share its slot: give it a hash tag, such as {%s}", ErrInvalidArgument, key, strings.ReplaceAll(key, "}", ""))
	}
	return nil
}
