package redigo_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/drivers/redigo"
	"github.com/redlock-go/redlock/drivertest"
)

func TestAcceptance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
		p := &redis.Pool{
			MaxIdle:     16,
			IdleTimeout: time.Minute,
			Dial: func() (redis.Conn, error) {
				return redis.Dial("tcp", addr, redis.DialReadTimeout(3*time.Second), redis.DialWriteTimeout(3*time.Second))
			},
		}
		t.Cleanup(func() { _ = p.Close() })
		return redigo.New(p, addr)
	})
}
