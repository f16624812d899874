// The notices on a key's channel: the scripts' when a key is taken, handed
// over or released, and a waiter's when it asks for the key; their channel
// and format.

package redlock

import (
	"strconv"
	"strings"
)

const (
	noticePrefix = "redlock:notices:"
	maxAge       = 1 << 16   // in a notice; more is not a notice of ours
	maxWantTTL   = 1<<31 - 1 // in a wanted notice, in milliseconds (24 days)
)

// noticeChannel is the pub/sub channel on which key's releases and
// acquisitions are announced.
func noticeChannel(key string) string { return noticePrefix + key }

// shardedChannel is key's notice channel on a Redis Cluster master: a shard
// channel (SPUBLISH, SSUBSCRIBE) in key's hash slot, so that the shard that
// holds the key delivers its notices, and a script's SPUBLISH counts every
// subscriber that hears it. It is the part of key that Redis hashes, in
// braces, then noticeChannel(key): a hash tag in front, and key whole after
// it, so that channelKey finds key again. (Keys with a '}' but no hash tag
// are refused where a vote is a cluster: slotless.)
func shardedChannel(key string) string { return "{" + hashedPart(key) + "}" + noticeChannel(key) }

// noticeChannelOn is key's notice channel on a master: sharded on a Redis
// Cluster, plain otherwise.
func noticeChannelOn(key string, cluster bool) string {
	if cluster {
		return shardedChannel(key)
	}
	return noticeChannel(key)
}

// channelKey is the key whose notice channel, plain or sharded, channel is;
// ok is false for any other channel.
func channelKey(channel string) (key string, ok bool) {
	if strings.HasPrefix(channel, "{") {
		end := strings.IndexByte(channel, '}')
		if end < 0 {
			return "", false
		}
		channel = channel[end+1:]
	}
	return strings.CutPrefix(channel, noticePrefix)
}

const (
	acquiredNotice = "acquired" // a master gave the key to the token
	releasedNotice = "released" // a master deleted the token's key
	handedNotice   = "handed"   // a master replaced a valid holder's token with the client's waiter's (wants.go)
	wantedNotice   = "wanted"   // the client's waiter asks for the key for the token, for n milliseconds; 0: no more
)

// A notice is a message the scripts publish when they change the key; the
// zero notice publishes nothing.
type notice struct{ channel, message string }

// newNotice is the notice of kind about key and token, on behalf of the
// Client whose id is client. n is, for a wanted notice, the TTL asked for,
// in milliseconds; for the others, how many releases the acquiring waiter
// had seen go to others (its age).
func newNotice(kind, key, client, token string, n int) notice {
	return notice{noticeChannel(key), kind + " " + client + " " + token + " " + strconv.Itoa(n)}
}

// parseNotice splits a notice; ok is false for anything else.
func parseNotice(msg string) (kind, client, token string, n int, ok bool) {
	f := strings.Fields(msg)
	if len(f) != 4 {
		return "", "", "", 0, false
	}
	limit := maxAge
	switch f[0] {
	case acquiredNotice, releasedNotice, handedNotice:
	case wantedNotice:
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
