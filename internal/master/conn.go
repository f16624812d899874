// Package master is how the library reaches one Redis master: a
// driver.Conn (any client library's adapter) behind what the lock logic
// uses (Conn: run a script with its NOSCRIPT fallback, publish, subscribe),
// and the per-master auto-pipelining (Pipe) that batches script calls. It
// decides nothing about locks: it sends what it is given, under the
// deadlines it is given.
package master

import (
	"context"
	"strings"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/internal/script"
)

// A Conn is one master as the lock logic reaches it: a driver.Conn, and
// whether it is a Redis Cluster. Its methods are safe for concurrent use,
// and return when ctx ends at the latest (the library enforces its own
// deadlines on top; see fanOut).
type Conn struct {
	D       driver.Conn
	cluster bool
}

// NewConn returns the Conn over d; cluster tells whether d is a Redis
// Cluster (driver.Topology's Kind).
func NewConn(d driver.Conn, cluster bool) Conn { return Conn{D: d, cluster: cluster} }

// Script runs a script command, EVALSHA's arguments (script.Evalsha), and
// runs the script's source with EVAL when the master does not know it
// (NOSCRIPT: restarted, or its script cache flushed).
func (c Conn) Script(ctx context.Context, args []any) driver.Reply { return Script(ctx, c.D, args) }

// Publish sends message on channel: a shard channel on a Redis Cluster.
func (c Conn) Publish(ctx context.Context, channel, message string) error {
	return c.D.Do(ctx, c.publish(), channel, message).Err
}

// PublishAll sends messages[i] on channels[i], for each i, in one round
// trip (a pipeline), and returns the first error.
func (c Conn) PublishAll(ctx context.Context, channels, messages []string) error {
	cmds := make([][]any, len(channels))
	for i, ch := range channels {
		cmds[i] = []any{c.publish(), ch, messages[i]}
	}
	for _, r := range c.D.DoMulti(ctx, cmds...) {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// publish is the publishing command: a script's PUBLISH on a Redis Cluster
// reaches its own shard's subscribers only, so notices go on shard
// channels there (script.ShardedChannel).
func (c Conn) publish() string {
	if c.cluster {
		return "spublish"
	}
	return "publish"
}

// Subscribe opens a pub/sub connection subscribed to nothing yet: on shard
// channels on a Redis Cluster.
func (c Conn) Subscribe() driver.Subscription { return c.D.Subscribe() }

// Cluster reports whether the master is a Redis Cluster, whose scripts may
// only touch one hash slot, and whose script PUBLISH counts only its own
// shard's subscribers.
func (c Conn) Cluster() bool { return c.cluster }

// Script sends a script command alone, and again as EVAL with the script's
// source when the master does not know the script (NOSCRIPT).
func Script(ctx context.Context, d driver.Conn, args []any) driver.Reply {
	r := d.Do(ctx, args...)
	if isNoScript(r.Err) {
		if eval := script.AsEval(args); eval != nil {
			r = d.Do(ctx, eval...)
		}
	}
	return r
}

// isNoScript reports whether err is a master's NOSCRIPT: it does not know
// the script's SHA1.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "NOSCRIPT") // KVRocks adds "ERR "
}

// IsNoPerm reports whether err is a master's refusal for want of ACL rights
// (a channel, for PUBLISH or SUBSCRIBE).
func IsNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(strings.TrimPrefix(err.Error(), "ERR "), "NOPERM")
}
