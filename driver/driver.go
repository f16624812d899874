// Package driver is what the library asks of a Redis client library: the
// interface an adapter implements so that a Client can reach its masters
// through any Go Redis driver. The go-redis adapter (package
// driver/goredis) is the default; adapters for rueidis, valkey-go and
// redigo are nested modules (drivers/rueidis, drivers/valkey,
// drivers/redigo), and package drivertest is the acceptance suite
// any adapter should pass.
//
// An adapter moves bytes: it sends the commands it is given and hands back
// the replies as the server sent them. Everything about locks stays in the
// library: which commands to send, the script cache's NOSCRIPT fallback to
// EVAL, deadlines, retries of whole rounds, the choice between PUBLISH and
// SPUBLISH.
package driver

import (
	"context"
	"errors"
	"fmt"
)

// ErrNil is the error of a nil reply: a missing key's GET, a script that
// returned false or nil. An adapter reports it as an error e for which
// errors.Is(e, ErrNil) holds, and with a nil Val.
var ErrNil = errors.New("redlock/driver: nil reply")

// A Conn is one node of a Client: a Redis master, or a client that reaches
// several (a Redis Cluster, a sharded ring) and routes each command to the
// master that serves its keys. Its methods must be safe for concurrent use.
//
// Every call takes a ctx, and should return with an error soon after ctx
// is done (go-redis does with ContextTimeoutEnabled; otherwise at its read
// timeout). The library puts its own deadline on every call and decides
// its rounds on time whatever the driver does: a call that outlives its
// ctx finishes in the background, which costs a goroutine and a connection
// while it lasts, and holds up Close. A call may be sent again after a
// network error (the library's scripts are written to be run twice), but
// not after its ctx ended.
type Conn interface {
	// Do sends one command, args as the server takes them (the command's
	// name first; then strings, []byte, integers), and returns its reply.
	Do(ctx context.Context, args ...any) Reply
	// DoMulti sends cmds, in order, in one round trip where it can (a
	// pipeline), and returns their replies in the same order: len(cmds)
	// of them, each the reply Do would have given. A reply that did not
	// come (the connection broke, ctx ended) has an error. On a Single or
	// Failover Conn the commands go on one connection, so that the master
	// runs them in the order given (sent again after a network error,
	// they go again whole and in order): the library reads its restart
	// guard's marker right after a SET so. On a Cluster each command goes
	// to the master of its keys.
	DoMulti(ctx context.Context, cmds ...[]any) []Reply
	// Subscribe opens a pub/sub connection, subscribed to nothing yet.
	// With Topology().Kind Cluster, its channels are shard channels
	// (SSUBSCRIBE), each on the master of its hash slot.
	Subscribe() Subscription
	// Topology says what stands behind the Conn. It is asked once, by
	// redlock's constructor, and must not use the network.
	Topology() Topology
}

// A Reply is a server's answer to one command. Val holds it, typed as
// the server sent it: an integer as int64, a simple or bulk string as
// string, an array as []any of those (arrays nest), a nil reply as nil.
// Err is not nil when there is no value: ErrNil for a nil reply; the server's
// error reply, whose Error() is the server's message as sent ("NOSCRIPT
// No matching script...", "WRONGTYPE ...", "NOPERM ..."), which the library
// reads by its prefix (a driver may strip the generic "ERR ", as rueidis
// does); or why no reply came (ctx, the network).
type Reply struct {
	Val any
	Err error
}

// Int64 returns r's integer, or r.Err, or an error when Val is not an
// integer.
func (r Reply) Int64() (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	if v, ok := r.Val.(int64); ok {
		return v, nil
	}
	return 0, &TypeError{Want: "an integer", Val: r.Val}
}

// Text returns r's string, or r.Err, or an error when Val is not a string.
func (r Reply) Text() (string, error) {
	if r.Err != nil {
		return "", r.Err
	}
	if v, ok := r.Val.(string); ok {
		return v, nil
	}
	return "", &TypeError{Want: "a string", Val: r.Val}
}

// Slice returns r's array, or r.Err, or an error when Val is not an array.
func (r Reply) Slice() ([]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	if v, ok := r.Val.([]any); ok {
		return v, nil
	}
	return nil, &TypeError{Want: "an array", Val: r.Val}
}

// A TypeError is a Reply's error when its value is not of the type asked
// for.
type TypeError struct {
	Want string // "an integer", "a string" or "an array"
	Val  any
}

func (e *TypeError) Error() string {
	return "redlock/driver: reply is " + describe(e.Val) + ", want " + e.Want
}

func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case int64:
		return "an integer"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("a %T", v)
}

// A Subscription is one pub/sub connection of a Conn. The library calls
// Subscribe and Unsubscribe one at a time, in order, and Run once, on a
// goroutine of its own, before or after the first Subscribe.
//
// Run delivers, in order, on the goroutine that called it, the server's
// confirmations of each subscription (Subscribed, Unsubscribed) and the
// messages on the channels subscribed, until Close is called; then it
// returns, promptly (Close need not wait for it). Close may be called
// while a Subscribe or Unsubscribe is in flight on another goroutine (it
// may wait for that call, which its ctx bounds).
//
// A connection that breaks is the Subscription's to mend: it connects
// again and subscribes again to the channels it had (delivering their
// confirmations again), without being asked, for as long as it is open.
// Messages published meanwhile are lost; the library polls as well, and a
// lost message costs latency only. A Subscribe or Unsubscribe call cut by
// a broken connection or by ctx may leave its channel in either state
// (a client may replace the connection before adding the channel): it
// returns an error, and the caller asks again until the confirmation
// comes. A server's refusal (NOPERM: an ACL user without channel rights)
// is returned as the server's error.
type Subscription interface {
	Subscribe(ctx context.Context, channel string) error
	Unsubscribe(ctx context.Context, channel string) error
	Run(deliver func(Event))
	Close() error
}

// An Event is what a Subscription delivers: a confirmation that Channel is
// subscribed or unsubscribed, or a message on it.
type Event struct {
	Kind    EventKind
	Channel string
	Payload string // a message's
}

// An EventKind tells the Events apart.
type EventKind int

// The kinds of Event.
const (
	Subscribed EventKind = iota
	Unsubscribed
	Message
)

// A Topology says what stands behind a Conn: how many masters, and how the
// library tells them apart from other nodes' (New refuses one server given
// as two nodes, whose vote would count twice).
type Topology struct {
	// Kind is the node's shape; the zero value is Single.
	Kind Kind
	// Addrs are the addresses the Conn was configured with, as host:port
	// (or "unix:" and a socket's path): a Single master's one, a Cluster's
	// seeds, a Ring's shards; none for a Failover Conn, or when unknown.
	// They name the node in errors and logs, and two nodes sharing one
	// are refused without the network.
	Addrs []string
	// Servers, when not nil, calls fn for each master behind the Conn
	// (every master of a Cluster, every shard of a Ring; the master of a
	// Failover Conn as found now), in parallel or in turn, with a Conn
	// that sends to that master alone and the address it was reached at
	// ("" when unknown), and returns when every fn has or ctx ended. New
	// asks each master for its INFO run_id (the same server behind two
	// nodes is refused) and, on a Ring, checks the restart guard's rights
	// on each shard. Nil means one master, reached by the Conn itself,
	// at Addrs[0] when there is exactly one.
	Servers func(ctx context.Context, fn func(ctx context.Context, addr string, server Conn)) error
}

// A Kind is a node's shape.
type Kind int

// The kinds of node.
const (
	// Single is one master.
	Single Kind = iota
	// Failover is one master found through Redis Sentinel, which may move.
	Failover
	// Cluster is a Redis Cluster: the library keeps every script's keys in
	// one hash slot, and publishes and subscribes on shard channels
	// (SPUBLISH, SSUBSCRIBE), since a script's PUBLISH reaches only the
	// subscribers of its own shard.
	Cluster
	// Ring is client-side sharding by key (go-redis's Ring). Pub/sub
	// channels are sharded apart from the keys whose scripts publish on
	// them, so the Client's notices are off over it (WithoutNotices).
	Ring
)
