// Package redlock provides mutual exclusion across machines with the
// Redlock algorithm over N independent Redis masters.
//
// A Client sends every request to all masters in parallel, each under its own
// deadline that the Client enforces itself, and decides the moment the
// outcome is known: a majority (N/2+1) said yes, or a majority became
// impossible. A lock is valid for ttl − elapsed − drift on the local
// monotonic clock (Lock.Until); Extend moves that end, Unlock releases the
// lock and reports ErrNotHeld when the caller can no longer be sure it held
// the lock alone.
//
//	c, err := redlock.New([]redis.UniversalClient{n1, n2, n3, n4, n5})
//	...
//	l, err := c.Lock(ctx, "invoice:42", 10*time.Second)
//	if err != nil {
//		return err // errors.Is(err, redlock.ErrNotObtained)
//	}
//	defer l.Unlock(ctx)
//
// # Guarantees and assumptions
//
// Safety holds while the masters' clocks advance at a rate within the drift
// factor of the client's, the masters are independent (no replication
// between them, no failover that loses writes), and a master that restarts
// without persistence stays out of quorums for at least the longest TTL in
// use. Nothing stops a holder that is paused past Until (a GC pause, a VM
// stall) from acting after its lock expired: check Until, or use Extend's and
// Unlock's errors, before acting on shared state; and where the shared state
// can check a number, pass it the lock's fencing token (Lock.Fence), which
// grows from one holder of the key to the next, so that it refuses a late
// holder's writes.
package redlock
