package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/redlocktest"
)

func newLocks(t *testing.T) *redlock.Client {
	t.Helper()
	return redlocktest.Start(t, 5).NewClient(t, redlock.WithNodeTimeout(time.Second))
}

// post sends n concurrent POSTs for name, released together, and counts the
// status codes.
func post(t *testing.T, url, name string, n int) map[int]int {
	t.Helper()
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.Post(url+"/users", "application/json", strings.NewReader(`{"name":"`+name+`"}`))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	return codes
}

func TestConcurrentDuplicatesCreateTheUserOnce(t *testing.T) {
	store := newUserStore(50 * time.Millisecond)
	srv := httptest.NewServer(createUser(newLocks(t), store))
	defer srv.Close()

	codes := post(t, srv.URL, "ada", 20)
	if codes[http.StatusCreated] != 1 || codes[http.StatusConflict] != 19 {
		t.Fatalf("status codes %v, want one 201 and nineteen 409", codes)
	}
	if store.count() != 1 {
		t.Fatalf("%d users created", store.count())
	}
	// Later duplicates are refused too, by the store's check under the lock.
	if codes := post(t, srv.URL, "ada", 3); codes[http.StatusConflict] != 3 {
		t.Fatalf("late duplicates: %v", codes)
	}
}

// TestWithoutTheLockDuplicatesGetThrough is the control: the same store and
// requests with a handler that skips the lock create the user many times,
// so the test above is not passing by luck of timing.
func TestWithoutTheLockDuplicatesGetThrough(t *testing.T) {
	store := newUserStore(50 * time.Millisecond)
	created := 0
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if store.exists("ada") {
			w.WriteHeader(http.StatusConflict)
			return
		}
		store.insert("ada")
		mu.Lock()
		created++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	if codes := post(t, srv.URL, "ada", 20); codes[http.StatusCreated] < 2 {
		t.Fatalf("without the lock only %d requests created the user; the control shows no race", codes[http.StatusCreated])
	}
}

func TestBadRequests(t *testing.T) {
	srv := httptest.NewServer(createUser(newLocks(t), newUserStore(0)))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/users", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("empty name: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/users")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
}
