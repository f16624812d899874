package drivertest_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/drivertest"
)

// An adapter's acceptance test: Run starts the redis-server processes and
// calls the Dial for each Conn it needs; the Dial closes its client when
// the subtest ends. (The test function is shown, not run: it needs
// redis-server on PATH.)
func ExampleRun() {
	testAcceptance := func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			return goredis.New(c)
		})
	}
	_ = testAcceptance
}
