package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The configuration faults and the persistent restart, on one real node,
// through a client that connects as an ACL user like the fault generator's.
func TestConfigurationFaultsAndPersistentRestart(t *testing.T) {
	ctx := context.Background()
	cl := Start(t, 1, Options{ClockNode: -1, Users: []string{"app on >pw ~* +@all &*"}})
	n := cl.Nodes[0]
	app := cl.Clients(&redis.Options{Username: "app", Password: "pw", MaxRetries: -1})[0]
	script := redis.NewScript(`redis.call('SET', KEYS[1], 'v', 'PX', 60000); return redis.call('PUBLISH', 'ch', 'm')`)

	if err := script.Run(ctx, app, []string{"k"}).Err(); err != nil {
		t.Fatalf("script as app: %v", err)
	}
	if err := n.RevokeChannels("app"); err != nil {
		t.Fatal(err)
	}
	n.Admin.Del(ctx, "k")
	err := script.Run(ctx, app, []string{"k"}).Err()
	if err == nil || !strings.Contains(err.Error(), "publish") {
		t.Fatalf("script without channel rights: %v, want an error at its PUBLISH", err)
	}
	if v, _ := n.Admin.Get(ctx, "k").Result(); v != "v" {
		t.Fatalf("the SET before the failed PUBLISH should have run: %q", v)
	}

	if err := n.OutOfMemory(); err != nil {
		t.Fatal(err)
	}
	if err := app.Set(ctx, "k2", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET out of memory: %v, want OOM", err)
	}
	if err := app.PExpire(ctx, "k", time.Minute).Err(); err != nil {
		t.Fatalf("PEXPIRE out of memory: %v", err)
	}
	if err := app.Del(ctx, "k").Err(); err != nil {
		t.Fatalf("DEL out of memory: %v", err)
	}

	cl.Heal()
	if err := script.Run(ctx, app, []string{"k"}).Err(); err != nil {
		t.Fatalf("after Heal: %v", err)
	}

	v, ttl, at, err := n.Lease(ctx, "k")
	if err != nil || v != "v" || ttl <= 0 || ttl > time.Minute || time.Since(at) > time.Second {
		t.Fatalf("Lease: %q %v %v %v", v, ttl, at, err)
	}
	if v, ttl, _, err := n.Lease(ctx, "absent"); err != nil || v != "" || ttl >= 0 {
		t.Fatalf("Lease of a missing key: %q %v %v", v, ttl, err)
	}

	// appendfsync always: an acknowledged write survives kill -9, the ACL
	// user comes back with the restart, the memory limit does not.
	if err := n.EnableAOF(); err != nil {
		t.Fatal(err)
	}
	if err := n.OutOfMemory(); err != nil {
		t.Fatal(err)
	}
	if err := app.PExpire(ctx, "k", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	n.Server.Kill()
	n.RestartAOF()
	if v, ttl, _, err := n.Lease(ctx, "k"); err != nil || v != "v" || ttl < 50*time.Second {
		t.Fatalf("after the AOF restart: %q %v %v", v, ttl, err)
	}
	if err := app.Set(ctx, "k2", "v", 0).Err(); err != nil {
		t.Fatalf("SET as app after the restart: %v", err)
	}
	ttls := cl.KeyTTLs(t, "k*")[0]
	if len(ttls) != 2 || ttls["k"] <= 0 || ttls["k2"] != -1 {
		t.Fatalf("KeyTTLs: %v", ttls)
	}
	cl.Reset(t)
}

// A SIGSTOPped node does not hold a Lease past its ctx.
func TestLeaseOfAPausedNodeEndsWithItsContext(t *testing.T) {
	cl := Start(t, 1, Options{ClockNode: -1})
	n := cl.Nodes[0]
	n.Server.Pause()
	defer n.Server.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, _, _, err := n.Lease(ctx, "k"); err == nil {
		t.Fatal("Lease of a paused node succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Lease of a paused node took %v", d)
	}
}
