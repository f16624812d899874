package peers

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The pub/sub oracle is the least a turn can cost on five masters when each
// locker is a process of its own and learns of its turn from the masters,
// as redlock's waiters do: it takes part in BenchmarkContendedProcesses
// only. Its lockers line up for free, through the benchmark's shared file
// (a ticket each, in the order they ask), so a holder knows its successor
// without hearing its want. Its release is one round on every master of a
// script that moves the key on to the next ticket and publishes that to
// the successor's process, returning at the majority; the successor holds
// the key once a majority of masters told it so. Nothing else: no tokens
// (the key holds the ticket's number, and a master takes any later one,
// so one that falls behind catches up by itself), no validity, no restart
// guard, no wants, no clean-up. It is a bound, not a lock to use.
type pubSubOracle struct {
	clients []redis.UniversalClient
	quorum  int
	shm     *shared
	me      int64       // this process's id
	notes   chan notice // the masters' notices to this process: node, ticket
	subs    []*redis.PubSub

	// The line oracle's: the processes that announced the tickets after
	// this process's own, as heard (nil: the pub/sub oracle, which reads
	// them from the shared file), and the master its next announcement
	// goes to.
	line     *sync.Map // ticket → process
	announce int
}

// The pub/sub line oracle is the pub/sub oracle whose holder learns which
// process holds the next ticket only from the masters, as a lock across
// machines must: each waiter announces its ticket and process once, by a
// PUBLISH on the broadcast channel of one master (in turn), which every
// process hears, and the holder keeps what it heard; once its turn came,
// it withdraws the want the same way, as a lock whose waiters may give up
// must tell every other holder-to-be (redlock's served withdrawal). Two
// broadcasts per turn, heard by every process: the line redlock keeps,
// and nothing else of it. Its order is still free (the shared file's
// tickets). A holder that has not heard its successor yet moves the key
// on with a broadcast, as the pub/sub oracle does.

// procImpls are the lockers of BenchmarkContendedProcesses: impls, and
// the pub/sub oracles.
var procImpls = append(slices.Clip(impls),
	impl{"oracle-pubsub", 5, newPubSubOracle, nil},
	impl{"oracle-pubsub-line", 5, newPubSubLineOracle, nil})

// A notice is one master's word that a ticket's turn has come.
type notice struct {
	node   int
	ticket int64
}

// The shared file's words for the oracle's line: the next ticket, and, per
// ticket (a ring: no more than 8 lockers wait at once), the process that
// holds it, 0 while none has said.
const (
	sharedTicket    = sharedWords
	sharedOwners    = sharedTicket + 1
	oracleRing      = 16
	sharedFileWords = sharedOwners + oracleRing
)

// The oracle's channels: a process's own is oracleChannel and its id.
const (
	oracleChannel   = "oracle:"
	oracleBroadcast = "oracle:all"
)

// oracleMove moves the key on to ticket ARGV[1] (for ARGV[2] ms) unless it
// already holds that ticket or a later one, and tells channel ARGV[3] so.
var oracleMove = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')
if cur < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[3], ARGV[1])
  return 1
end
return 0`)

// newPubSubOracle makes a worker process's oracle locker: it subscribes to
// its own channel and to the broadcast one on every master before the
// worker says it is ready.
func newPubSubOracle(clients []redis.UniversalClient) locker {
	return newOracle(clients, false)
}

// newPubSubLineOracle makes a worker process's line oracle locker.
func newPubSubLineOracle(clients []redis.UniversalClient) locker {
	return newOracle(clients, true)
}

// An announcement on the broadcast channel: "want <ticket> <process>".
const oracleWant = "want "

func newOracle(clients []redis.UniversalClient, line bool) *pubSubOracle {
	shm, err := mapShared(os.Getenv("PEERS_SHARED"))
	if err != nil {
		panic(err)
	}
	o := &pubSubOracle{
		clients: clients,
		quorum:  len(clients)/2 + 1,
		shm:     shm,
		me:      int64(os.Getpid()),
		notes:   make(chan notice, 1024),
	}
	if line {
		o.line = &sync.Map{}
	}
	for i, c := range clients {
		ps := c.Subscribe(bg, o.channel(o.me), oracleBroadcast)
		for range 2 { // the subscriptions' confirmations
			if _, err := ps.Receive(bg); err != nil {
				panic(err)
			}
		}
		o.subs = append(o.subs, ps)
		go func() {
			for {
				m, err := ps.Receive(bg)
				if err != nil {
					return // closed
				}
				msg, ok := m.(*redis.Message)
				if !ok {
					continue
				}
				if want, ok := strings.CutPrefix(msg.Payload, oracleWant); ok {
					t, p, _ := strings.Cut(want, " ")
					ticket, err1 := strconv.ParseInt(t, 10, 64)
					proc, err2 := strconv.ParseInt(p, 10, 64)
					switch {
					case err1 != nil || err2 != nil || o.line == nil:
					case proc == 0:
						o.line.Delete(ticket)
					default:
						o.line.Store(ticket, proc)
					}
				} else if t, err := strconv.ParseInt(msg.Payload, 10, 64); err == nil {
					o.notes <- notice{i, t}
				}
			}
		}()
	}
	return o
}

// publishWant publishes, on the broadcast channel of the next master in
// turn, that process proc waits for ticket t (0: no more), and returns the
// PUBLISH's error when it comes.
func (o *pubSubOracle) publishWant(t, proc int64) <-chan error {
	c := o.clients[o.announce%len(o.clients)]
	o.announce++
	done := make(chan error, 1)
	go func() {
		done <- c.Publish(bg, oracleBroadcast, oracleWant+strconv.FormatInt(t, 10)+" "+strconv.FormatInt(proc, 10)).Err()
	}()
	return done
}

func (o *pubSubOracle) channel(proc int64) string {
	return oracleChannel + strconv.FormatInt(proc, 10)
}

// owner is the word that says which process holds ticket.
func (o *pubSubOracle) owner(ticket int64) *atomic.Int64 {
	return o.shm.word(sharedOwners + int(ticket%oracleRing))
}

func (o *pubSubOracle) try(context.Context, string) (func() error, error) {
	return nil, errors.New("oracle: only waits")
}

// wait takes a ticket and waits until a majority of masters said its turn
// has come; ticket 0 takes the key on every master.
func (o *pubSubOracle) wait(ctx context.Context, key string) (func() error, error) {
	t := o.shm.word(sharedTicket).Add(1) - 1
	if o.line == nil {
		o.owner(t).Store(o.me)
	} else if t > 0 {
		if err := <-o.publishWant(t, o.me); err != nil {
			return nil, err
		}
	}
	if t == 0 {
		f := &floor{clients: o.clients, quorum: o.quorum}
		won, rest := f.round(func(c redis.UniversalClient) bool {
			return c.Set(ctx, key, "0", ttl).Err() == nil
		})
		rest()
		if !won {
			return nil, errors.New("oracle: no majority for the first ticket")
		}
	} else {
		var heard uint64
		for n := 0; n < o.quorum; {
			select {
			case note := <-o.notes:
				if note.ticket == t && heard&(1<<note.node) == 0 {
					heard |= 1 << note.node
					n++
				}
			case <-ctx.Done():
				return nil, ctx.Err() // (the benchmark never cancels)
			}
		}
	}
	if o.line == nil {
		o.owner(t).Store(0)
	} else if t > 0 {
		o.publishWant(t, 0) // in the background, as redlock's served withdrawal
	}
	return func() error { return o.release(key, t) }, nil
}

// release moves the key on to the next ticket, telling its process, or
// every process when the next ticket has no holder yet (it may be taken
// while the round is on its way).
func (o *pubSubOracle) release(key string, t int64) error {
	next := t + 1
	ch := oracleBroadcast
	if o.line != nil {
		if p, ok := o.line.LoadAndDelete(next); ok {
			ch = o.channel(p.(int64))
		}
	} else if p := o.owner(next).Load(); p != 0 {
		ch = o.channel(p)
	}
	f := &floor{clients: o.clients, quorum: o.quorum}
	won, _ := f.round(func(c redis.UniversalClient) bool {
		return oracleMove.Run(bg, c, []string{key}, next, ttl.Milliseconds(), ch).Err() == nil
	})
	if !won {
		return errors.New("oracle: the move reached no majority")
	}
	return nil
}

func (o *pubSubOracle) close() {
	for _, ps := range o.subs {
		_ = ps.Close()
	}
}
