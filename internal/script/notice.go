// The notices on a key's channel: the scripts' when a key is taken or
// released, and a waiter's when it asks for the key; on a Client's own
// channel for the key, a hand-off to one of its waiters; their channels and
// format.

package script

import (
	"strconv"
	"strings"
)

// The notice channels' names, and a notice's bounds.
const (
	NoticePrefix = "redlock:notices:"
	handedInfix  = "handed:" // after noticePrefix, in a handedChannel
	maxAge       = 1 << 16   // in a notice; more is not a notice of ours
	maxWantTTL   = 1<<31 - 1 // in a wanted notice, in milliseconds (24 days)
)

// NoticeChannel is the pub/sub channel on which key's releases and
// acquisitions are announced.
func NoticeChannel(key string) string { return NoticePrefix + key }

// HandedChannel is the pub/sub channel on which a hand-off of key to a
// waiter of the Client whose id is client is announced (wants.go): that
// Client alone hears it, where every Client that watches key would hear it
// on key's notice channel, five notices to each per turn. It shares the
// notice channels' prefix, so that the channel rights the README gives
// (&redlock:notices:*) cover it: it is also the notice channel of the key
// "handed:<client>:<key>", which no caller names (client is a Client's
// random id), and the Client whose channel it is takes it for its own
// (channelKey).
func HandedChannel(key, client string) string {
	return NoticePrefix + handedInfix + client + ":" + key
}

// HandedSuffix ends the id of every Client that subscribes to its
// handedChannels. A Client of an earlier version does not, and its waiters
// hear of a hand-off only on the key's notice channel, as every Client did
// then (handOffChannel).
const HandedSuffix = "+h"

// HandOffChannel is the channel on which a hand-off of key to a waiter of
// client is announced: client's handedChannel, or, for a Client of an
// earlier version, key's notice channel, where the other Clients hear that
// the want was served, since its Client does not withdraw it (wants.go).
func HandOffChannel(key, client string) string {
	if strings.HasSuffix(client, HandedSuffix) {
		return HandedChannel(key, client)
	}
	return NoticeChannel(key)
}

// ShardedChannel is key's notice channel on a Redis Cluster master: a shard
// channel (SPUBLISH, SSUBSCRIBE) in key's hash slot, so that the shard that
// holds the key delivers its notices, and a script's SPUBLISH counts every
// subscriber that hears it. It is the part of key that Redis hashes, in
// braces, then noticeChannel(key): a hash tag in front, and key whole after
// it, so that channelKey finds key again. (Keys with a '}' but no hash tag
// are refused where a vote is a cluster: slotless.)
func ShardedChannel(key string) string { return sharded(key, NoticeChannel(key)) }

// sharded is the plain channel ch of key (its notice channel, or a
// Client's handedChannel) as a shard channel in key's slot.
func sharded(key, ch string) string { return "{" + hashedPart(key) + "}" + ch }

// NoticeChannelOn is key's notice channel on a master: sharded on a Redis
// Cluster, plain otherwise.
func NoticeChannelOn(key string, cluster bool) string {
	if cluster {
		return ShardedChannel(key)
	}
	return NoticeChannel(key)
}

// ChannelOn is key's plain channel ch (its notice channel, or a
// handedChannel of it) on a master: a shard channel in key's slot on a
// Redis Cluster, ch itself otherwise.
func ChannelOn(key, ch string, cluster bool) string {
	if !cluster {
		return ch
	}
	return sharded(key, ch)
}

// ChannelKey is the key whose notice channel, plain or sharded, channel is,
// or whose handedChannel for the Client whose id is id (handed); ok is false
// for any other channel.
func ChannelKey(channel, id string) (key string, handed, ok bool) {
	if strings.HasPrefix(channel, "{") {
		end := strings.IndexByte(channel, '}')
		if end < 0 {
			return "", false, false
		}
		channel = channel[end+1:]
	}
	key, ok = strings.CutPrefix(channel, NoticePrefix)
	if !ok {
		return "", false, false
	}
	if rest, mine := strings.CutPrefix(key, handedInfix+id+":"); mine && id != "" {
		return rest, true, true
	}
	return key, false, true
}

// The kinds of notice.
const (
	AcquiredNotice = "acquired" // a master gave the key to the token
	ReleasedNotice = "released" // a master deleted the token's key
	HandedNotice   = "handed"   // a master replaced a valid holder's token with the client's waiter's (wants.go), on the client's handedChannel
	WantedNotice   = "wanted"   // the client's waiter asks for the key for the token, for n milliseconds; 0: no more
)

// A Notice is a message the scripts publish when they change the key, on
// one of key's channels; the zero notice publishes nothing.
type Notice struct{ Key, Channel, Message string }

// NewNotice is the notice of kind about key and token, on behalf of the
// Client whose id is client. n is, for a wanted notice, the TTL asked for,
// in milliseconds; for the others, how many releases the acquiring waiter
// had seen go to others (its age).
func NewNotice(kind, key, client, token string, n int) Notice {
	return Notice{key, NoticeChannel(key), kind + " " + client + " " + token + " " + strconv.Itoa(n)}
}

// ParseNotice splits a notice; ok is false for anything else.
func ParseNotice(msg string) (kind, client, token string, n int, ok bool) {
	f := strings.Fields(msg)
	if len(f) != 4 {
		return "", "", "", 0, false
	}
	limit := maxAge
	switch f[0] {
	case AcquiredNotice, ReleasedNotice, HandedNotice:
	case WantedNotice:
		limit = maxWantTTL
	default:
		return "", "", "", 0, false
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n < 0 || n > limit || strconv.Itoa(n) != f[3] {
		return "", "", "", 0, false
	}
	return f[0], f[1], f[2], n, true
}
