// Package core is redlock's protocol decisions as plain values: no
// goroutines, no clocks, no network, no driver. The I/O shell
// (internal/engine: connections, pipes, workers, timers) feeds it events (a
// master's vote, a failure, the end of a round) with the times it read off
// its own clock, and does what the returned outcomes say. The same code
// runs under the deterministic model checker in internal/model, which
// explores every interleaving of a small world against it.
//
// # Invariants
//
// The core keeps these; each is named by a test and a mutant.
//
//   - I1 (majority): a round is won only with Quorum(n) = n/2+1 counted
//     yes votes of n masters, and lost as soon as more than n−Quorum(n)
//     masters cannot count.
//   - I2 (validity): a lock won by a round that started at start is valid
//     until start + ttl − Drift(ttl); every key was set after start, so
//     expires after start + ttl. Validity is never counted from the
//     decision.
//   - I3 (guard, witness): a yes from a master whose memory is younger
//     than the guard is not counted once any master reported a memory
//     older than it by more than the slack.
//   - I4 (guard, enough reports): such a yes counts only once
//     Witnessed(n) = n − Quorum(n) + 2 masters reported their memory
//     (every master, when strict), none is older, and no master the Client
//     knew to be older is yet to report. Any majority that granted a live
//     lock then shares two masters with the reports, so one of them is a
//     witness unless two masters lost their data within the guard (one
//     more than the default tolerates; strict tolerates a minority). So an
//     extension under the guard asks the masters that refused the lock for
//     their reports while fewer than Witnessed(n) are known to hold it
//     (NeedsWitnesses).
//   - I5 (guard, end): a yes still held back when the round ends does not
//     count.
//   - I6 (extension): an extension round won before the lock's end moves
//     the end to the later of that end and start + ttl − Drift(ttl) of its
//     own start; never earlier, and never for a round decided after the
//     lock's end, whose keys may have expired and been taken meanwhile.
//     The masters never shorten a key (internal/script/lua/extend.lua), so
//     the keys of the majority outlive the new end.
//   - I7 (release): Unlock reports the lock held to its end only when a
//     majority deleted its token, or a hand-off replaced it, in a round
//     decided before the lock's end (Released): after the end, the keys
//     may have expired and been taken meanwhile, and the caller cannot be
//     sure it held the lock alone.
//   - I8 (handed validity): a lock a hand-off to another Client's waiter
//     gave it is valid until first + ttl − Drift(ttl), where first is when
//     the waiter first announced its token, never from when the waiter
//     heard the notices; with less than half the ttl left of that, the
//     waiter confirms the key with an extension round and is valid from
//     its start (Handed).
//   - I9 (trusted hand-off): a hand-off skips the guard's memory report,
//     where the key holds the lock's token, only for a TTL no longer than
//     the shortest the marker recorded for the lock's keys (TrustedHandOff).
//   - I10 (round's end): a round waits for the masters until the node
//     deadline, and never past the end of the validity it could win
//     (RoundEnd).
//   - I11 (reserves): a quorum-first round holds masters in reserve only
//     under the restart guard, with three masters or more: without the
//     guard, one master that restarts empty would take a lock on a bare
//     majority down (Reserves).
//   - I12 (hand-off): an Unlock hands the key on only for a single-key
//     lock, while it is valid and notices are on (MayHandOff).
//   - I13 (no starvation): a local waiter has the key before other
//     Clients' waiters only while every other Client heard to want it
//     announced itself (LocalFirst).
//   - I14 (Unlock's reserves): an Unlock's round of a handed lock holds
//     back the masters never heard only once the Client has timed a round,
//     and only while at least twice the hedge is left of the validity
//     (UnlockReserves).
//   - I15 (widening): an extension asks the masters that lack the key to
//     take it only when it lengthens the lock: a key taken now vouches for
//     no earlier end (Widens).
//   - I16 (hedge): a quorum-first round waits for its preferred masters
//     three of the Client's usual rounds, at least MinHedge, at most half
//     the node deadline (half of it until a round was timed), then asks its
//     reserves: a hung master costs a hedge, not the deadline (HedgeAfter).
//   - I17 (reserves asked): a quorum-first round asks its reserves at once
//     when a vote of a master it asked adds no counted yes: those asked
//     cannot decide it alone (AsksReserves).
//   - I18 (hand-off's masters): a hand-off to another Client's waiter
//     skips a master only where the lock's token is known not to be (its
//     call was refused), never one no notice told of, where a missed
//     hand-off may have put it (RemoteSkips).
//
// A lock keeps, per master, the state of the call that asked it to take
// the key (Hold):
//
//   - H1 (one release): exactly one side releases a master: the second of
//     "the call returned" and "the lock gave the master up", and only when
//     the call may have set the key (it said yes, or failed).
//   - H2 (never sent): a call is not sent once the lock gave its master up.
//   - H3 (reserves and retakes): a master never asked counts as refused;
//     Extend may ask it, or ask again one whose taking failed, until
//     Unlock begins, which gives a master never asked up.
//   - H4 (unheard): a master of a handed lock no notice told of is held
//     back by Unlock until a notice or a yes tells of the token; then
//     Unlock asks it as one that holds the token.
//
// A hand-off to another Client's waiter (Line, the holder's; Expected, the
// waiter's Client's) keeps these:
//
//   - W1 (over is over): a want withdrawn or served is over, and a late
//     copy of it (a master that was paused sends it after the withdrawal)
//     does not put it back in line: no hand-off goes to a token whose want
//     is over.
//   - W2 (doubt): a want is passed over once a quorum of the masters may
//     have missed notices since it was last heard (its withdrawal, or a
//     hand-off to it, may be among them), until its waiter repeats it.
//   - W3 (order): the hand-off goes to the fresh want heard first; a
//     repetition keeps its place, a Client's new token takes the place of
//     its older one.
//   - W4 (withdrawal): a withdrawal removes only its own token's want: a
//     Client's newer want outlives an older one's withdrawal.
//   - W5 (counting): a waiter's Client counts a master's hand-off notice
//     only for a token it still expects, and each master once; the lock is
//     the waiter's once Quorum(n) masters did.
//
// A waiter's Client keeps, for each token its waiter is done with (it gave
// up, or took the lock a hand-off gave it), where the token is released
// (Retired):
//
//   - R1 (late hand-off): a hand-off that puts the token on a master after
//     its waiter was done is released there at once only when the waiter's
//     Client is done with it (the waiter gave up, or its lock was let go)
//     and that lock's Unlock is decided: a release ahead of the lock's own
//     hand-off, still queued for the master, would take away the key it
//     passes on. While the lock is held, its Unlock releases the master.
//   - R2 (sweep): the first late notice of a token let go, or the end of
//     the Unlock of a lock a hand-off gave while a master was never heard,
//     schedules one sweep, which releases the token on every master not
//     released yet. Each late notice of a token let go makes every other
//     master one to release again (a round may have put the token anywhere,
//     its other notices lost), by another sweep if one ran: a round of
//     which the Client hears one notice is released everywhere.
//   - R3 (Close): a sweep scheduled that has not run is Close's to do.
//
// A waiting Lock call (Waiter) keeps these:
//
//   - A1 (announcement): the want goes out when it was never sent, is
//     doubted, or was last sent wantRefresh ago or more. Its first
//     announcement is stamped before the copy is sent, and no repetition
//     moves it: a hand-off's validity counts from it (I8).
//   - A2 (gap): once the key's watch may have missed notices since the
//     last attempt (its gaps moved while it hears every master), the
//     waiter attempts at once, asking first for a hand-off it did not
//     hear, and its want goes out again: other Clients may doubt it (W2).
//   - A3 (probe): every attempt but one after a contention delay first
//     asks the masters whether a hand-off gave the want the key with
//     notices the Client did not hear.
//   - A4 (patience): the waiter waits the longest backoff only while its
//     want is out and one holder is known to hold the key (its notices, or
//     the refusals of a majority for one holder, HeldByOne), and no
//     release was heard since: that holder hands the key on without the
//     timer. Otherwise it waits the backoff after its latest failed
//     attempt.
package core
