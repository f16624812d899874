// Publish/subscribe: SUBSCRIBE, UNSUBSCRIBE, PUBLISH and
// PUBSUB NUMSUB, with replies and messages in RESP2's array form, as Redis
// sends them. Patterns (PSUBSCRIBE) are not supported.

package memredis

import (
	"maps"
	"slices"
	"strings"
)

// cmdSubscribe replies to each channel with ["subscribe", channel, number
// of the connection's subscriptions].
func cmdSubscribe(s *Server, c *conn, args []string) any {
	if c.subs == nil {
		c.subs = map[string]bool{}
	}
	out := multi{}
	for _, ch := range args[1:] {
		c.subs[ch] = true
		if s.channels[ch] == nil {
			s.channels[ch] = map[*conn]struct{}{}
		}
		s.channels[ch][c] = struct{}{}
		out = append(out, []any{"subscribe", ch, int64(len(c.subs))})
	}
	return out
}

// cmdUnsubscribe unsubscribes from the channels given, or else from all
// the connection's, replying as cmdSubscribe does.
func cmdUnsubscribe(s *Server, c *conn, args []string) any {
	channels := args[1:]
	if len(channels) == 0 {
		channels = slices.Sorted(maps.Keys(c.subs))
	}
	if len(channels) == 0 {
		return []any{"unsubscribe", nil, int64(0)}
	}
	out := multi{}
	for _, ch := range channels {
		s.unsubscribe(c, ch)
		out = append(out, []any{"unsubscribe", ch, int64(len(c.subs))})
	}
	return out
}

func (s *Server) unsubscribe(c *conn, ch string) {
	delete(c.subs, ch)
	delete(s.channels[ch], c)
	if len(s.channels[ch]) == 0 {
		delete(s.channels, ch)
	}
}

// unsubscribeAll ends all of c's subscriptions, as when it disconnects.
func (s *Server) unsubscribeAll(c *conn) {
	for ch := range c.subs {
		s.unsubscribe(c, ch)
	}
}

func cmdPublish(s *Server, _ *conn, args []string) any {
	return int64(s.publish(args[1], args[2]))
}

// publish queues msg for ch's subscribers and returns how many there were.
func (s *Server) publish(ch, msg string) int {
	b := appendReply(nil, []any{"message", ch, msg})
	for c := range s.channels[ch] {
		c.send(b)
	}
	return len(s.channels[ch])
}

// cmdPubSub serves PUBSUB NUMSUB.
func cmdPubSub(s *Server, _ *conn, args []string) any {
	if strings.ToUpper(args[1]) == "NUMSUB" {
		out := []any{}
		for _, ch := range args[2:] {
			out = append(out, ch, int64(len(s.channels[ch])))
		}
		return out
	}
	return errReply("ERR unknown subcommand or wrong number of arguments for '" + args[1] + "'. Try PUBSUB HELP.")
}

// PubSubNumSub returns how many connections subscribe to each channel.
func (s *Server) PubSubNumSub(channels ...string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := make(map[string]int, len(channels))
	for _, ch := range channels {
		n[ch] = len(s.channels[ch])
	}
	return n
}
