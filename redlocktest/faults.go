package redlocktest

import (
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// hold is every master's pre-hook: it delays each command by the master's
// Latency, then holds it while the master is paused.
func (m *Masters) hold(i int) {
	m.mu.Lock()
	paused, d := m.paused[i], m.delay[i]
	m.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	if paused != nil {
		<-paused
	}
}

// Pause makes master i hold every command it receives, unanswered, until
// the returned resume is called (as a master stopped with SIGSTOP, or one
// behind a stalled network, would): a Client's per-master deadline
// (WithNodeTimeout) then counts it as timed out. resume may be called more
// than once; the test's end calls it. Client.Close waits for the replies
// its Client is owed: resume first (NewClient's Clients do).
func (m *Masters) Pause(i int) (resume func()) {
	m.server(i)
	ch := make(chan struct{})
	m.mu.Lock()
	if old := m.paused[i]; old != nil {
		close(old)
	}
	m.paused[i] = ch
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			if m.paused[i] == ch {
				delete(m.paused, i)
			}
			m.mu.Unlock()
			close(ch)
		})
	}
}

// resumeAll releases every command a Pause holds.
func (m *Masters) resumeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, ch := range m.paused {
		close(ch)
		delete(m.paused, i)
	}
}

// Latency delays every command master i receives by d before it runs; 0
// removes the delay.
func (m *Masters) Latency(i int, d time.Duration) {
	m.server(i)
	m.mu.Lock()
	m.delay[i] = max(d, 0)
	m.mu.Unlock()
}

// Down stops master i: it closes its connections and refuses new ones
// (as a crashed or unreachable master), keeping its data for Up. Commands a
// Pause held are released first, onto connections that are closing.
func (m *Masters) Down(i int) {
	s := m.server(i)
	m.mu.Lock()
	if ch := m.paused[i]; ch != nil {
		close(ch)
		delete(m.paused, i)
	}
	m.mu.Unlock()
	s.Close()
}

// Up restarts master i, stopped by Down, on the same address, with the data
// it had: a master restarted from its persistence. It fails the test if the
// master is running (see Run).
func (m *Masters) Up(i int) {
	if err := m.server(i).Restart(); err != nil {
		m.fail("Up(%d): %v", i, err)
	}
}

// LoseData restarts master i empty: a master restarted without persistence,
// which has forgotten every lock it held. Its memory is new, so the restart
// guard (WithRestartGuard) sets its vote aside until the guard has passed.
func (m *Masters) LoseData(i int) {
	s := m.server(i)
	m.Down(i)
	s.FlushAll()
	if err := s.Restart(); err != nil {
		m.fail("LoseData(%d): %v", i, err)
	}
}

// Expire removes key from every master, as its TTL running out would: its
// holder's next Extend fails with ErrLockLost, a Do on it ends fn's ctx and
// returns ErrLockLost, and its Unlock returns ErrNotHeld.
func (m *Masters) Expire(key string) {
	for _, s := range m.servers {
		s.Del(key)
	}
}

// Steal sets key on every master to a token no Client holds, for ttl, as a
// holder that took the key after it expired would: the lock is lost as with
// Expire, and nobody else obtains key until ttl has passed.
func (m *Masters) Steal(key string, ttl time.Duration) {
	for _, s := range m.servers {
		_ = s.Set(key, StolenToken)
		s.SetTTL(key, ttl)
	}
}

// StolenToken is the token Steal writes.
const StolenToken = "redlocktest-stolen"

// Votes returns how many masters hold key for token: the value of key on
// them is token. A Down master counts with the data it keeps for Up.
func (m *Masters) Votes(key, token string) int {
	n := 0
	for _, s := range m.servers {
		if v, err := s.Get(key); err == nil && v == token {
			n++
		}
	}
	return n
}

// AssertHeld fails t unless a majority of the masters hold each of l's keys
// for l's token.
func (m *Masters) AssertHeld(t testing.TB, l *redlock.Lock) {
	t.Helper()
	for _, key := range l.Keys() {
		if v := m.Votes(key, l.Token()); v <= m.Len()/2 {
			t.Errorf("redlocktest: %q is held for %s by %d of %d masters, not a majority", key, l, v, m.Len())
		}
	}
}

// AssertFree fails t if any master holds key. A Lock that failed releases
// what it took in the background: Client.Close waits for that.
func (m *Masters) AssertFree(t testing.TB, key string) {
	t.Helper()
	for i, s := range m.servers {
		if v, err := s.Get(key); err == nil {
			t.Errorf("redlocktest: master %d holds %q for %q", i, key, v)
		}
	}
}
