// The example's storage service: per item, a value and the highest fencing
// token it has accepted, checked atomically with every write.

package main

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleFence is what Store.Write returns, wrapped, for a write it
// refuses: its fence is lower than one the store already accepted for the
// item, repeats an accepted fence from another writer, or is missing.
var ErrStaleFence = errors.New("stale fence")

// Store stands in for the storage service a lock protects (a database, an
// object store, a payment API). A Store from NewStore checks fencing
// tokens; one from NewUncheckedStore accepts every write, as a store that
// knows nothing of fences does. It is safe for concurrent use.
type Store struct {
	checkFences bool

	mu    sync.Mutex // held across each check and its write
	items map[string]version
}

// version is what the store keeps of an item: its value, and the fence and
// writer of the write that set it. In a checking store, fence is the
// highest fence accepted for the item.
type version struct {
	value  string
	fence  uint64
	writer string
}

// NewStore returns a store that refuses stale fences.
func NewStore() *Store {
	return &Store{checkFences: true, items: map[string]version{}}
}

// NewUncheckedStore returns a store that ignores fences: the control.
func NewUncheckedStore() *Store {
	return &Store{items: map[string]version{}}
}

// Write sets item to value on behalf of writer, which holds the lock with
// the given fence. A checking store refuses, with an error matching
// ErrStaleFence, a fence of 0 (no fence), a fence lower than the highest it
// has accepted for item, and that highest fence from a different writer;
// the same writer may write again with its fence.
//
// The check and the write happen under one mutex, so that no other write
// can come between them. A real store must do the same in one step of its
// own: a conditional update in the transaction that writes, such as
//
//	UPDATE items SET value = $1, fence = $2, writer = $3
//	WHERE id = $4 AND (fence < $2 OR (fence = $2 AND writer = $3))
//
// (zero rows updated: refused), or a compare-and-set on (fence, writer).
// Reading the highest fence first and writing afterwards, in the client or
// in two statements, is the very race fencing exists to close.
func (s *Store) Write(item, value, writer string, fence uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.items[item]
	if s.checkFences {
		switch {
		case fence == 0:
			return fmt.Errorf("%w: item %q: the write carries no fence", ErrStaleFence, item)
		case ok && fence < cur.fence:
			return fmt.Errorf("%w: item %q: fence %d is lower than %d, already accepted",
				ErrStaleFence, item, fence, cur.fence)
		case ok && fence == cur.fence && writer != cur.writer:
			return fmt.Errorf("%w: item %q: fence %d was already accepted from another writer",
				ErrStaleFence, item, fence)
		}
	}
	s.items[item] = version{value: value, fence: fence, writer: writer}
	return nil
}

// Read returns item's value and the fence it was written with; ok is false
// when the item was never written.
func (s *Store) Read(item string) (value string, fence uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.items[item]
	return v.value, v.fence, ok
}
