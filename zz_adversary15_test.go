package redlock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redistest"
)

func advShardNumSub(t *testing.T, cl *redistest.Cluster, master int, ch string) int64 {
	c := cl.Masters[master].Client(nil)
	defer c.Close()
	v, err := c.Do(bg, "PUBSUB", "SHARDNUMSUB", ch).Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("SHARDNUMSUB %v %v", v, err)
	}
	n, _ := v[1].(int64)
	return n
}

func advCount(fn string) int {
	buf := make([]byte, 1<<22)
	s := string(buf[:runtime.Stack(buf, true)])
	return strings.Count(s, fn)
}

// unsubscribe then subscribe again of one channel, at once (as a watch's
// linger ending, then a new waiter).
func TestAdv15UnsubResub(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client()
	s := newShardSubs(cc)
	go s.run(func(e subEvent) {})
	ch := shardedChannel("k")
	home := shardOf(hashSlot("k"), 3)
	if err := s.subscribe(bg, ch); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("after subscribe: SHARDNUMSUB=%d", advShardNumSub(t, cl, home, ch))
	_ = s.unsubscribe(bg, ch)
	_ = s.subscribe(bg, ch)
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		t.Logf("t=%dms SHARDNUMSUB=%d resubscribe goroutines=%d", (i+1)*500, advShardNumSub(t, cl, home, ch), advCount("redlock.(*shardSubs).resubscribe"))
	}
	start := time.Now()
	_ = s.close()
	t.Logf("close took %v", time.Since(start))
}

// keys of distinct slots on master 0 of 3 shards
func advKeys(n int, sameSlot bool) []string {
	var out []string
	slots := map[int]bool{}
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("adv%d", i)
		sl := hashSlot(k)
		if shardOf(sl, 3) != 0 {
			continue
		}
		if sameSlot {
			k = fmt.Sprintf("{adv3}%d", i)
			out = append(out, k)
			continue
		}
		if slots[sl] {
			continue
		}
		slots[sl] = true
		out = append(out, k)
	}
	return out
}

func advWokenAfter(t *testing.T, fault func(clusters []*redistest.Cluster), nkeys int, sameSlot bool) {
	advWoken(t, fault, nkeys, sameSlot, false)
}

func advWoken(t *testing.T, fault func(clusters []*redistest.Cluster), nkeys int, sameSlot, relock bool) {
	clusters, nodes := clusterVotes(t, 3, 3)
	keys := advKeys(nkeys, sameSlot)
	if sameSlot {
		for i := range keys {
			if shardOf(hashSlot(keys[i]), 3) != 0 {
				t.Skip("tag not on 0")
			}
		}
	}
	a, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	backoff := 10 * time.Second
	if relock {
		backoff = 25 * time.Second
	}
	b, err := New(nodes, WithRetryDelay(backoff, backoff))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var ls []*Lock
	for _, k := range keys {
		ls = append(ls, mustLock(t, a, k, time.Minute))
	}
	got := make([]chan error, len(keys))
	for i, k := range keys {
		got[i] = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 60*time.Second)
			defer cancel()
			lb, err := b.Lock(ctx, k, time.Minute)
			if err == nil {
				defer lb.Unlock(bg)
			}
			got[i] <- err
		}()
	}
	for v := range clusters {
		for _, k := range keys {
			deadline := time.Now().Add(5 * time.Second)
			for advShardNumSub(t, clusters[v], 0, shardedChannel(k)) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("not subscribed")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	fault(clusters)
	time.Sleep(1500 * time.Millisecond)
	for v := range clusters {
		for _, k := range keys {
			t.Logf("vote %d key %s slot %d: SHARDNUMSUB on master 0 after fault = %d", v, k, hashSlot(k), advShardNumSub(t, clusters[v], 0, shardedChannel(k)))
		}
	}
	if relock {
		for i, k := range keys {
			ls[i] = mustLock(t, a, k, time.Minute)
		}
	}
	for i, l := range ls {
		start := time.Now()
		if err := l.Unlock(bg); err != nil {
			t.Fatalf("unlock: %v", err)
		}
		select {
		case err := <-got[i]:
			t.Logf("key %s: waiter got it %v after Unlock (err %v)", keys[i], time.Since(start), err)
			if time.Since(start) > backoff/2 {
				t.Errorf("key %s: woken by backoff, not notice", keys[i])
			}
		case <-time.After(40 * time.Second):
			t.Errorf("never")
		}
	}
}

func advClientKill(clusters []*redistest.Cluster) {
	for _, cl := range clusters {
		c := cl.Masters[0].Client(nil)
		n, err := c.Do(bg, "CLIENT", "KILL", "TYPE", "pubsub").Result()
		fmt.Println("CLIENT KILL TYPE pubsub:", n, err)
		c.Close()
	}
}

func TestAdv15ClientKillTwoSlots(t *testing.T) { advWokenAfter(t, advClientKill, 2, false) }
func TestAdv15ClientKillOneSlot(t *testing.T)  { advWokenAfter(t, advClientKill, 2, true) }

func advKillRestart(clusters []*redistest.Cluster) {
	for _, cl := range clusters {
		cl.Masters[0].Restart()
	}
	for _, cl := range clusters {
		c := cl.Masters[0].Client(nil)
		for i := 0; i < 200; i++ {
			info, _ := c.ClusterInfo(bg).Result()
			if strings.Contains(info, "cluster_state:ok") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
}

func TestAdv15RestartTwoSlots(t *testing.T) { advWoken(t, advKillRestart, 2, false, true) }
func TestAdv15RestartOneSlot(t *testing.T)  { advWoken(t, advKillRestart, 2, true, true) }
