package redigo_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/drivers/redigo"
	"github.com/redlock-go/redlock/internal/redistest"
)

// connectionsReceived is the server's count of connections ever accepted.
func connectionsReceived(t *testing.T, admin redis.Conn) int {
	t.Helper()
	info, err := redis.String(admin.Do("INFO", "stats"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatal("INFO stats has no total_connections_received")
	return 0
}

// An ACL user without channel rights: the refusal of its SUBSCRIBE is the
// error of a Subscribe, and the connection, which a refusal leaves usable,
// is kept: no new one is dialled for it.
func TestASubscribeWithoutChannelRightsIsRefusedOnOneConnection(t *testing.T) {
	s := redistest.Start(t)
	admin, err := redis.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Do("ACL", "SETUSER", "app", "reset", "on", ">pw", "~*", "+@all", "resetchannels"); err != nil {
		t.Fatal(err)
	}
	p := &redis.Pool{Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", s.Addr, redis.DialUsername("app"), redis.DialPassword("pw"))
	}}
	defer p.Close()
	sub := redigo.New(p, s.Addr).Subscribe()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		sub.Run(func(driver.Event) {})
	}()
	before := connectionsReceived(t, admin)
	var refused error
	for i := 0; i < 3 && refused == nil; i++ { // the first may open the connection and return at once
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		refused = sub.Subscribe(ctx, "ch")
		cancel()
	}
	if refused == nil || !strings.Contains(refused.Error(), "NOPERM") {
		t.Errorf("Subscribe without channel rights: %v, want the server's NOPERM", refused)
	}
	if n := connectionsReceived(t, admin) - before; n > 2 {
		t.Errorf("%d connections dialled for one subscription, want at most 2", n)
	}
	_ = sub.Close()
	<-ran
}
