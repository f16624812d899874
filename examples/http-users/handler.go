// The HTTP handler: create a user once, under a lock on its name.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// userStore stands in for a database whose "create" is check-then-insert
// and takes a while, the shape that lets concurrent duplicates through.
type userStore struct {
	mu    sync.Mutex
	users map[string]time.Time
	delay time.Duration
}

func newUserStore(delay time.Duration) *userStore {
	return &userStore{users: map[string]time.Time{}, delay: delay}
}

func (s *userStore) exists(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.users[name]
	return ok
}

func (s *userStore) insert(name string) {
	time.Sleep(s.delay) // the write's latency
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[name] = time.Now()
}

func (s *userStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.users)
}

// lockWait bounds how long a request waits for another request creating
// the same user.
const lockWait = 2 * time.Second

// createUser handles POST /users {"name": "..."}: 201 when this request
// created the user, 409 when the user exists or another request is creating
// it right now, 503 when the lock service cannot be reached.
func createUser(locks *redlock.Client, store *userStore) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		var body struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" {
			http.Error(w, `want {"name": "..."}`, http.StatusBadRequest)
			return
		}

		// A short, bounded wait rather than TryLock: when many duplicates
		// arrive at once their single attempts can split the votes so
		// that none wins; Lock's jittered retries settle that within
		// milliseconds. The duplicates then find the user and get 409.
		ctx, cancel := context.WithTimeout(r.Context(), lockWait)
		l, err := locks.Lock(ctx, "user:"+body.Name, 5*time.Second)
		cancel()
		var qe *redlock.QuorumError
		switch {
		case errors.Is(err, context.DeadlineExceeded) && errors.As(err, &qe) && errors.Is(qe, redlock.ErrNodeRefused):
			http.Error(w, "user is being created", http.StatusConflict)
			return
		case err != nil:
			http.Error(w, "lock service unavailable", http.StatusServiceUnavailable)
			return
		}
		// Unlock only after the insert committed (pitfall 8: releasing
		// before the write is durable lets a duplicate in).
		defer func() { _ = l.Unlock(context.WithoutCancel(r.Context())) }()

		if store.exists(body.Name) {
			http.Error(w, "user exists", http.StatusConflict)
			return
		}
		if time.Until(l.Until()) < store.delay {
			// Not enough validity left to finish the write under the lock.
			http.Error(w, "lock expiring, retry", http.StatusServiceUnavailable)
			return
		}
		store.insert(body.Name)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"name": body.Name})
	}
}
