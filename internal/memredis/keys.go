// The keyspace: string keys with lazy expiry by the server's
// clock, the key commands (GET, SET, DEL, EXISTS, KEYS, TYPE, PTTL, TTL,
// PEXPIRE, EXPIRE, INCR), and the Go methods tests use to look at and change
// database 0 directly.

package memredis

import (
	"errors"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// An entry is a string key's value and its deadline (zero: none).
type entry struct {
	val string
	exp time.Time
}

// ErrKeyNotFound is Get's error for a key that does not exist.
var ErrKeyNotFound = errors.New("memredis: key not found")

// now is the server's clock: real time (or the time FreezeClock stopped
// it at) moved on by FastForward.
func (s *Server) now() time.Time {
	if !s.frozen.IsZero() {
		return s.frozen.Add(s.offset)
	}
	return time.Now().Add(s.offset)
}

// get returns key's entry in db, deleting it first if it has expired.
func (s *Server) get(db int, key string) (entry, bool) {
	e, ok := s.dbs[db][key]
	if ok && !e.exp.IsZero() && !s.now().Before(e.exp) {
		delete(s.dbs[db], key)
		return entry{}, false
	}
	return e, ok
}

// liveKeys returns db's keys that have not expired, sorted.
func (s *Server) liveKeys(db int) []string {
	for k := range s.dbs[db] {
		s.get(db, k)
	}
	return slices.Sorted(maps.Keys(s.dbs[db]))
}

func (s *Server) flushAll() {
	for i := range s.dbs {
		s.dbs[i] = map[string]entry{}
	}
}

func cmdGet(s *Server, c *conn, args []string) any {
	if e, ok := s.get(c.db, args[1]); ok {
		return e.val
	}
	return nil
}

// setOptions are SET's options after key and value.
type setOptions struct {
	nx, xx, get bool
	keepTTL     bool          // KEEPTTL: the old expiry stays
	ttl         time.Duration // 0: none
}

// parseSet parses [NX|XX] [PX ms|EX s|KEEPTTL] [GET].
func parseSet(args []string) (o setOptions, e errReply) {
	for i := 0; i < len(args); i++ {
		switch opt := strings.ToUpper(args[i]); {
		case opt == "NX" && !o.xx:
			o.nx = true
		case opt == "XX" && !o.nx:
			o.xx = true
		case opt == "GET":
			o.get = true
		case opt == "KEEPTTL" && o.ttl == 0:
			o.keepTTL = true
		case (opt == "PX" || opt == "EX") && o.ttl == 0 && !o.keepTTL && i+1 < len(args):
			i++
			n, err := strconv.ParseInt(args[i], 10, 64)
			if err != nil {
				return o, errNotInt
			}
			if n <= 0 || n > 1<<46 {
				return o, errReply("ERR invalid expire time in 'set' command")
			}
			o.ttl = time.Duration(n) * time.Millisecond
			if opt == "EX" {
				o.ttl *= 1000
			}
		default:
			return o, errSyntax
		}
	}
	return o, ""
}

// cmdSet serves SET key value [NX|XX] [PX ms|EX s|KEEPTTL] [GET]: OK, or nil when
// NX or XX kept it from writing; with GET, the old value or nil.
func cmdSet(s *Server, c *conn, args []string) any {
	o, e := parseSet(args[3:])
	if e != "" {
		return e
	}
	old, exists := s.get(c.db, args[1])
	written := (!o.nx || !exists) && (!o.xx || exists)
	if written {
		e := entry{val: args[2]}
		switch {
		case o.ttl > 0:
			e.exp = s.now().Add(o.ttl)
		case o.keepTTL:
			e.exp = old.exp
		}
		s.dbs[c.db][args[1]] = e
	}
	switch {
	case o.get && exists:
		return old.val
	case o.get || !written:
		return nil
	}
	return status("OK")
}

// cmdIncr serves INCR key: the value after adding 1 (a missing key counts
// as 0), keeping the key's expiry.
func cmdIncr(s *Server, c *conn, args []string) any {
	e, exists := s.get(c.db, args[1])
	n := int64(0)
	if exists {
		v, err := strconv.ParseInt(e.val, 10, 64)
		if err != nil || v == math.MaxInt64 {
			return errNotInt
		}
		n = v
	}
	n++
	e.val = strconv.FormatInt(n, 10)
	s.dbs[c.db][args[1]] = e
	return n
}

func cmdDel(s *Server, c *conn, args []string) any {
	var n int64
	for _, k := range args[1:] {
		if _, ok := s.get(c.db, k); ok {
			delete(s.dbs[c.db], k)
			n++
		}
	}
	return n
}

func cmdExists(s *Server, c *conn, args []string) any {
	var n int64
	for _, k := range args[1:] {
		if _, ok := s.get(c.db, k); ok {
			n++
		}
	}
	return n
}

func cmdKeys(s *Server, c *conn, args []string) any {
	keys := []any{}
	for _, k := range s.liveKeys(c.db) {
		if globMatch(args[1], k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func cmdType(s *Server, c *conn, args []string) any {
	if _, ok := s.get(c.db, args[1]); ok {
		return status("string")
	}
	return status("none")
}

// cmdTTL returns PTTL (unit ms) or TTL (unit s, rounded): a key's time to
// live, -2 for no key, -1 for no deadline.
func cmdTTL(unit time.Duration) func(*Server, *conn, []string) any {
	return func(s *Server, c *conn, args []string) any {
		e, ok := s.get(c.db, args[1])
		switch {
		case !ok:
			return int64(-2)
		case e.exp.IsZero():
			return int64(-1)
		case unit == time.Second:
			return int64(e.exp.Sub(s.now()).Round(time.Second) / time.Second)
		}
		return int64(e.exp.Sub(s.now()) / time.Millisecond)
	}
}

// cmdExpire returns PEXPIRE (unit ms) or EXPIRE (unit s): it sets a
// key's deadline args[2] units from now, deleting the key when that is not
// in the future; 1 when the key exists, else 0.
func cmdExpire(unit time.Duration) func(*Server, *conn, []string) any {
	return func(s *Server, c *conn, args []string) any {
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil || n > 1<<46 || n < -(1<<46) {
			return errNotInt
		}
		e, ok := s.get(c.db, args[1])
		switch {
		case !ok:
			return int64(0)
		case n <= 0:
			delete(s.dbs[c.db], args[1])
		default:
			e.exp = s.now().Add(time.Duration(n) * unit)
			s.dbs[c.db][args[1]] = e
		}
		return int64(1)
	}
}

// globMatch reports whether key matches a Redis glob pattern (* ? [...]
// and \ escapes): path.Match's, with / made an ordinary character.
func globMatch(pattern, key string) bool {
	slash := strings.NewReplacer("/", "\x00")
	ok, _ := path.Match(slash.Replace(pattern), slash.Replace(key))
	return ok
}

// Exists reports whether key exists in database 0.
func (s *Server) Exists(key string) bool {
	_, err := s.Get(key)
	return err == nil
}

// Get returns key's value in database 0, or ErrKeyNotFound.
func (s *Server) Get(key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.get(0, key); ok {
		return e.val, nil
	}
	return "", ErrKeyNotFound
}

// Set sets key to value in database 0, without a deadline.
func (s *Server) Set(key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbs[0][key] = entry{val: value}
	return nil
}

// SetTTL makes an existing key of database 0 expire ttl from now by the
// server's clock; a ttl <= 0 removes its deadline.
func (s *Server) SetTTL(key string, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.get(0, key); ok {
		e.exp = time.Time{}
		if ttl > 0 {
			e.exp = s.now().Add(ttl)
		}
		s.dbs[0][key] = e
	}
}

// TTL returns how long key of database 0 has left to live by the server's
// clock, which runs in real time unless frozen, or 0 when it does not exist
// or has no deadline.
func (s *Server) TTL(key string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.get(0, key); ok && !e.exp.IsZero() {
		return e.exp.Sub(s.now())
	}
	return 0
}

// FreezeClock stops the server's clock: from then on it moves only by
// FastForward, as miniredis's does, so TTL returns exactly the ttl set
// less what was fast-forwarded, and no key expires by itself.
func (s *Server) FreezeClock() {
	s.mu.Lock()
	if s.frozen.IsZero() {
		s.frozen = time.Now()
	}
	s.mu.Unlock()
}

// FastForward moves the server's clock on by d: keys whose deadline it
// passes are expired.
func (s *Server) FastForward(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// FlushAll deletes every key of every database.
func (s *Server) FlushAll() {
	s.mu.Lock()
	s.flushAll()
	s.mu.Unlock()
}

// Keys returns database 0's keys, sorted.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveKeys(0)
}
