package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/drivertest"
)

// The go-redis adapter passes the acceptance suite, with go-redis's
// defaults but for ContextTimeoutEnabled: without it, go-redis bounds a
// call on a hung server by its ReadTimeout (3 s) rather than by the ctx.
func TestAcceptance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	})
}
