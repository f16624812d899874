// The faults one node takes: on its network (through its proxy: black hole,
// lost replies, latency, resets), its process (restart with or without
// persistence), its clock (libfaketime), its memory and its ACL rules.

package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// ProxyAddr is the address of the node's proxy, where Clients connect.
func (n *Node) ProxyAddr() string { return n.proxy.Addr() }

// fault switches the network fault name on with set, or fails if it is on
// already (until Heal).
func (n *Node) fault(name string, set func()) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.faults[name] {
		return fmt.Errorf("chaos: node %d: fault %s is on already", n.Index, name)
	}
	if n.faults == nil {
		n.faults = map[string]bool{}
	}
	n.faults[name] = true
	set()
	return nil
}

// BlackHole drops every request to the node from now on: commands never
// reach it and clients wait for replies that never come.
func (n *Node) BlackHole() error {
	return n.fault("blackhole", n.proxy.BlackHole)
}

// DropReplies lets requests through but drops every reply: commands run,
// clients never learn it.
func (n *Node) DropReplies() error {
	return n.fault("lost_replies", func() { n.proxy.DropReplies(0) })
}

// DropRepliesThenClose drops replies and closes each connection once after
// has passed without a reply dropped on it (counted from now, or from a new
// connection's start), so that go-redis sees a network error and re-sends
// the command on a new connection (its MaxRetries), where it runs again.
func (n *Node) DropRepliesThenClose(after time.Duration) error {
	return n.fault("lost_replies_close", func() { n.proxy.DropReplies(after) })
}

// DropReplyThenClose lets requests through, and closes each connection
// that carries a reply, dropping it: the command ran, and go-redis, which
// sees the connection end, re-sends it on a new connection (its
// MaxRetries), where it runs again. Unlike DropRepliesThenClose, the close
// waits for the reply, so a command slow to be sent still runs first.
func (n *Node) DropReplyThenClose() error {
	return n.fault("lost_reply_close", n.proxy.CloseOnReply)
}

// Latency delays every reply by d.
func (n *Node) Latency(d time.Duration) error {
	return n.fault("latency", func() { n.proxy.Latency(d) })
}

// ResetConnections answers every request with a TCP reset: the request is
// dropped and the connection torn down.
func (n *Node) ResetConnections() error {
	return n.fault("reset", n.proxy.ResetConnections)
}

// Heal removes the node's network faults at once; it never blocks on a
// connection. Connections that were open while requests or replies were
// being dropped are closed, so that clients waiting on them get an error at
// once instead of waiting out their read timeout; replies held by Latency
// are delivered at once.
func (n *Node) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.faults) == 0 {
		return
	}
	n.proxy.Heal()
	clear(n.faults)
}

// EnableAOF switches the running node to appendfsync always and waits until
// its AOF is in place, so that a key written from now on survives a kill.
// Restart the node with RestartAOF to load it.
func (n *Node) EnableAOF() error {
	ctx := context.Background()
	if err := n.Admin.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		return err
	}
	if err := n.Admin.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
		return err
	}
	n.aof = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := n.Admin.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if strings.Contains(info, "aof_enabled:1") && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: node %d: AOF not ready: %s", n.Index, info)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state; it offers no signal
	}
}

// RestartAOF kills the node and starts it again with appendfsync always,
// loading what its AOF holds.
func (n *Node) RestartAOF() {
	n.aof = true
	n.Server.Restart("--appendonly", "yes", "--appendfsync", "always")
}

// RestartEmpty kills the node, removes its persistence files and starts it
// again: it has forgotten every key, as a master without persistence does
// after a crash.
func (n *Node) RestartEmpty() error {
	n.Server.Kill()
	if err := n.Server.WipeData(); err != nil {
		return err
	}
	n.Server.Restart()
	n.aof = false
	return nil
}

// ClockFaked reports whether JumpClock moves the node's real clock
// (libfaketime) rather than shaving its keys' TTLs.
func (n *Node) ClockFaked() bool { return n.clockFile != "" }

// JumpClock moves the node's clock forward by d, so that Redis, which
// expires keys by wall clock, ends every TTL d early. Under libfaketime the
// process clock itself jumps; otherwise (fallback) every key's PTTL is cut
// by d, which is what the jump does to the keys.
func (n *Node) JumpClock(d time.Duration) error {
	if n.clockFile != "" {
		n.setClock(fmt.Sprintf("+%.3f", d.Seconds()))
		return nil
	}
	ctx := context.Background()
	keys, err := n.Admin.Keys(ctx, "*").Result()
	if err != nil {
		return err
	}
	for _, k := range keys {
		left, err := n.Admin.PTTL(ctx, k).Result()
		if err != nil {
			return err
		}
		if left < 0 {
			continue
		}
		if left <= d {
			err = n.Admin.Del(ctx, k).Err()
		} else {
			err = n.Admin.PExpire(ctx, k, left-d).Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) setClock(offset string) {
	// Written to a temporary file and renamed, so that libfaketime, which
	// rereads the file on every clock call, never sees it half written.
	tmp := n.clockFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(offset+"\n"), 0o600); err == nil {
		_ = os.Rename(tmp, n.clockFile)
	}
}

// OutOfMemory makes the node answer OOM to every command that may grow its
// memory — SET, also inside a script, where it fails the script before it
// wrote anything — while reads, DEL and PEXPIRE still work: a master at its
// maxmemory with the noeviction policy. RestoreMemory, Cluster.Heal or a
// restart undo it.
func (n *Node) OutOfMemory() error {
	ctx := context.Background()
	if err := n.Admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return fmt.Errorf("chaos: node %d: %w", n.Index, err)
	}
	if err := n.Admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		return fmt.Errorf("chaos: node %d: %w", n.Index, err)
	}
	n.mu.Lock()
	n.oom = true
	n.mu.Unlock()
	return nil
}

// RestoreMemory lifts OutOfMemory's limit.
func (n *Node) RestoreMemory() error {
	n.mu.Lock()
	n.oom = false
	n.mu.Unlock()
	if err := n.Admin.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
		return fmt.Errorf("chaos: node %d: %w", n.Index, err)
	}
	return nil
}

// RevokeChannels takes user's pub/sub channel rights away (ACL SETUSER
// user resetchannels, what acl-pubsub-default gives a user made without
// "&"): its PUBLISH and SUBSCRIBE answer NOPERM, also inside a script,
// after the script's earlier writes ran, and Redis disconnects its
// subscribed connections. GrantChannels, Cluster.Heal or a restart (for
// a user of Options.Users) undo it.
func (n *Node) RevokeChannels(user string) error {
	if err := n.Admin.Do(context.Background(), "ACL", "SETUSER", user, "resetchannels").Err(); err != nil {
		return fmt.Errorf("chaos: node %d: %w", n.Index, err)
	}
	n.mu.Lock()
	if n.revoked == nil {
		n.revoked = map[string]bool{}
	}
	n.revoked[user] = true
	n.mu.Unlock()
	return nil
}

// GrantChannels gives user the rights to every channel again.
func (n *Node) GrantChannels(user string) error {
	n.mu.Lock()
	delete(n.revoked, user)
	n.mu.Unlock()
	if err := n.Admin.Do(context.Background(), "ACL", "SETUSER", user, "allchannels").Err(); err != nil {
		return fmt.Errorf("chaos: node %d: %w", n.Index, err)
	}
	return nil
}

// restoreConfig undoes OutOfMemory and RevokeChannels. On a node that is
// down the commands fail, and there is nothing to undo: it restarts with
// its configuration.
func (n *Node) restoreConfig() {
	n.mu.Lock()
	oom := n.oom
	var users []string
	for u := range n.revoked {
		users = append(users, u)
	}
	n.mu.Unlock()
	if oom {
		_ = n.RestoreMemory()
	}
	for _, u := range users {
		_ = n.GrantChannels(u)
	}
}
