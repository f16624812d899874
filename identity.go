package redlock

import (
	"fmt"
	"net"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newNodes checks the clients given to New and wraps them.
//
// Two entries for one master would count one server's vote twice and break
// the majority arithmetic silently, so duplicates are an error. They are found
// by address where the client exposes one (a *redis.Client), and by identity
// otherwise.
func newNodes(clients []redis.UniversalClient) ([]*node, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalidArgument)
	}
	nodes := make([]*node, len(clients))
	seen := make(map[any]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%w: node %d is nil", ErrInvalidArgument, i)
		}
		addr, identity := nodeIdentity(c)
		if identity != nil {
			if j, dup := seen[identity]; dup {
				return nil, fmt.Errorf("%w: nodes %d and %d are the same server %s", ErrInvalidArgument, j, i, addr)
			}
			seen[identity] = i
		}
		if addr == "" {
			addr = fmt.Sprintf("node[%d]", i)
		}
		nodes[i] = &node{index: i, addr: addr, client: c}
	}
	return nodes, nil
}

// isNil reports whether c is nil or a typed nil pointer, which would panic on
// first use.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// nodeIdentity returns the client's address, if it exposes one, and a
// comparable value that is equal for two clients of the same server (nil when
// there is none: a client type that is not comparable cannot be checked).
func nodeIdentity(c redis.UniversalClient) (addr string, identity any) {
	if rc, ok := c.(*redis.Client); ok {
		o := rc.Options()
		addr = o.Addr
		if o.Network == "unix" {
			return addr, "unix:" + addr
		}
		return addr, "tcp:" + canonicalAddr(addr)
	}
	if reflect.TypeOf(c).Comparable() {
		return "", c
	}
	return "", nil
}

// canonicalAddr folds the common spellings of one loopback address together,
// so that "localhost:6379" and ":6379" are recognised as "127.0.0.1:6379".
// Other names are compared as written: resolving them would need DNS in New.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return strings.ToLower(addr)
	}
	host = strings.ToLower(host)
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
