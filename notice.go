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

// notice formats the message a node publishes for kind; age is how many
// releases the acquiring waiter had seen go to others.
func (c *Client) notice(kind, token string, age int) string {
	return kind + " " + c.id + " " + token + " " + strconv.Itoa(age)
}

// announce is the notice the nodes publish when they grant (kind
// acquiredNotice) or release key for token; none when notices are off.
func (c *Client) announce(kind, key, token string, age int) notice {
	if c.cfg.noWake {
		return notice{}
	}
	return notice{noticeChannel(key), c.notice(kind, token, age)}
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
