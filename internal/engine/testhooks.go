// Switches and counters for tests and benchmarks only. Production code
// never sets them: their zero value is the library's behaviour.

package engine

import (
	"sync/atomic"
	"time"
)

// testHooks turn parts of the waiting machinery off, or shorten them, so
// that tests and benchmarks can measure what each part does, and count what
// it did. No exported option reaches them. A Client's config holds one,
// never nil, shared by its copies.
type testHooks struct {
	noQueue         bool          // no per-key FIFO of local waiters
	noHandOff       bool          // Unlock never passes a lock straight to a waiter
	noRemoteHandOff bool          // nor to another Client's: waiters announce nothing (wants.go)
	linger          time.Duration // a key's subscription linger; 0: subscriptionLinger
	wantRefresh     time.Duration // how often a waiter repeats its want; 0: wantRefresh
	lateSweep       time.Duration // a late hand-off's sweep after its first notice; 0: longestNodeTimeout
	// beforeWatch and afterWatch run around a waiter's subscription after
	// its first failed attempt (retry.go, multi.go), on the waiter's goroutine.
	beforeWatch, afterWatch func()
	// extending runs in Extend once it found the lock valid, before its
	// round, on the caller's goroutine.
	extending func()
	// sleepingMulti runs as a LockMulti waiter goes to sleep (sleepMulti),
	// every time, with the channels of the key events it waits for; it
	// must copy them.
	sleepingMulti func(events []<-chan struct{})
	// announced runs once a waiter's want has been published (announce,
	// wants.go), with the withdrawal that follows it when the waiter gave
	// up meanwhile, on the publishing goroutine.
	announced func()
	// takingHandOff runs as a waiter's call takes the lock a hand-off gave
	// its want, on its goroutine: first thing in takeHanded (wants.go);
	// in probe, once the nodes confirmed the hand-off.
	takingHandOff func()
	// closeReleasing runs as Close starts releasing the tokens of the wants
	// it withdrew (withdrawAll).
	closeReleasing func()
	// unlocking runs in Unlock once the lock is marked released (and
	// letGo), before its hand-off or release round, on the caller's
	// goroutine.
	unlocking func()
	// confirming runs first thing in a waiter's confirmation round
	// (confirm, wants.go), on its goroutine.
	confirming func()

	handOffs       atomic.Int64 // locks Unlock passed straight to a local waiter
	remoteHandOffs atomic.Int64 // locks Unlock passed straight to another Client's waiter
	handedLocks    atomic.Int64 // locks a waiter of this Client got from another's hand-off
}
