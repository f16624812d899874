// The names of the library's keys on a master, beside a lock key: its
// memory marker, its fence counter, its wanted key; and Redis Cluster's hash
// slots, in which a script's keys must all lie.

package script

import "strings"

// FenceSuffix names a key's fence counter: key + fenceSuffix.
const FenceSuffix = ":redlock-fence"

// FenceKey is the key of key's fence counter on a master (see inSlotOf).
func FenceKey(key string, cluster bool) string {
	if !cluster {
		return key + FenceSuffix
	}
	return inSlotOf(key, FenceSuffix)
}

// inSlotOf names a key of the library's, key + suffix, in key's hash slot,
// as a script on a Redis Cluster master needs: key + suffix when key has a
// hash tag, and otherwise key becomes the tag. A key with a '}' but no hash
// tag has no such name (braces around it make another tag), so it is
// refused where a vote is a cluster (slotless); it gets key + suffix here,
// for plain masters, where slots do not matter.
func inSlotOf(key, suffix string) string {
	if hasHashTag(key) || strings.Contains(key, "}") {
		return key + suffix
	}
	return "{" + key + "}" + suffix
}

// Slotless reports whether key's library keys (its memory marker, its fence
// counter, its wanted key) cannot share its hash slot on a Redis Cluster
// master: it has a '}' but no hash tag. A script must declare them with the
// key, and a Cluster master refuses keys of two slots in one script.
func Slotless(key string) bool {
	return !hasHashTag(key) && strings.Contains(key, "}")
}

// hasHashTag reports whether Redis Cluster hashes only part of key: a '{'
// followed, later, by a '}' with at least one byte between them.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}

// MarkerKey is the master's memory marker that the scripts read: one per
// plain master; on a Redis Cluster master it must share the lock key's hash
// slot, so it is one per hash tag (inSlotOf), which knows only since that
// tag was first used there.
func MarkerKey(key string, cluster bool) string {
	if !cluster {
		return PlainMarkerKey
	}
	return inSlotOf(key, markerSuffix)
}

// The memory markers' names.
const (
	PlainMarkerKey = "redlock:memory"  // a plain master's marker
	markerSuffix   = ":redlock-memory" // a cluster master's, after the key's hash tag
)

// WantedSuffix ends a lock key's wanted key (lua/token.lua): where a waiter
// of another Client records that the key's value refused it, so that the
// holder announces its next hand-off. The lock key itself is never marked.
const WantedSuffix = ":redlock-wanted"

// WantedKey is the wanted key of lock key key on a master: key +
// wantedSuffix, on a Redis Cluster master in key's hash slot (inSlotOf),
// as a script's declared keys must be.
func WantedKey(key string, cluster bool) string {
	if !cluster {
		return key + WantedSuffix
	}
	return inSlotOf(key, WantedSuffix)
}

// hashedPart is the part of key that Redis Cluster hashes: its hash tag's
// content, or the whole key without one.
func hashedPart(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// HashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key without one, modulo 16384.
func HashSlot(key string) int {
	key = hashedPart(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}

// OwnKey reports whether key is a name the library uses for its own keys
// (a memory marker, a fence counter, a wanted key): a lock on it would
// overwrite them.
func OwnKey(key string) bool {
	return key == PlainMarkerKey || strings.HasSuffix(key, markerSuffix) || strings.HasSuffix(key, FenceSuffix) || strings.HasSuffix(key, WantedSuffix)
}
