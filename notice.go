// The notices the scripts publish when a key is taken or released: their
// channel and format.

package redlock

import (
	"strconv"
	"strings"
)

const (
	noticePrefix = "redlock:notices:"
	maxAge       = 1 << 16 // in a notice; more is not a notice of ours
)

// noticeChannel is the pub/sub channel on which key's releases and
// acquisitions are announced.
func noticeChannel(key string) string { return noticePrefix + key }

const (
	acquiredNotice = "acquired"
	releasedNotice = "released"
)

// A notice is a message the scripts publish when they change the key; the
// zero notice publishes nothing.
type notice struct{ channel, message string }

// newNotice is the notice the nodes publish when they grant (kind
// acquiredNotice) or release key for token, on behalf of the Client whose
// id is client; age is how many releases the acquiring waiter had seen go
// to others.
func newNotice(kind, key, client, token string, age int) notice {
	return notice{noticeChannel(key), kind + " " + client + " " + token + " " + strconv.Itoa(age)}
}

// parseNotice splits a notice; ok is false for anything else.
func parseNotice(msg string) (kind, client, token string, age int, ok bool) {
	f := strings.Fields(msg)
	if len(f) != 4 || (f[0] != acquiredNotice && f[0] != releasedNotice) {
		return "", "", "", 0, false
	}
	age, err := strconv.Atoi(f[3])
	if err != nil || age < 0 || age > maxAge || strconv.Itoa(age) != f[3] {
		return "", "", "", 0, false
	}
	return f[0], f[1], f[2], age, true
}
