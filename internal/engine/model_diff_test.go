package engine

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock/driver"
	"github.com/redlock-go/redlock/driver/goredis"
	"github.com/redlock-go/redlock/internal/master"
	"github.com/redlock-go/redlock/internal/model"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/script"
)

// TestModelMastersAnswerAsRedisDoes holds the model checker's simulated
// masters (internal/model's Master: Go renderings of lua/acquire.lua,
// lua/extend.lua, lua/release.lua and lua/memory.lua) to the real scripts
// on redis-server. One script run after another, each at its tick, on a
// fresh master and on a Master: the votes must agree, and so must what the
// key holds, for how many more ticks, and the memory's age, within one
// tick (the real clock moves while the real scripts run).
func TestModelMastersAnswerAsRedisDoes(t *testing.T) {
	tick := scaled(100 * time.Millisecond)
	type step struct {
		at        int8
		op        string // acquire, extend, release, restart, handoff (to the Client's next local waiter)
		token     int8
		ttl       int8
		wantModel bool // the vote the rendering must give (a check of the table itself)
		since     int  // extend: the step whose memory held the key when it was set (repair), -1: none; handoff: the new token
	}
	steps := []step{
		{0, "acquire", 1, 4, true, -1},
		{1, "acquire", 2, 4, false, -1},  // another holds it
		{1, "acquire", 1, 2, true, -1},   // our own key: lengthened, never shortened
		{2, "extend", 1, 1, true, -1},    // shorter: the key keeps its expiry
		{2, "extend", 2, 8, false, -1},   // not ours: untouched
		{3, "extend", 1, 6, true, -1},    // longer: now + 6
		{4, "release", 2, 0, false, -1},  // not ours
		{4, "release", 1, 0, true, -1},   // ours: deleted
		{5, "extend", 1, 4, false, -1},   // gone: no repair (born '0')
		{5, "extend", 1, 4, false, 0},    // gone, in the memory that held it: no repair
		{5, "acquire", 2, 2, true, -1},   // free: taken
		{8, "acquire", 1, 3, true, -1},   // expired: taken
		{9, "restart", 0, 0, false, -1},  // no key, no marker
		{14, "acquire", 2, 4, true, -1},  // a young memory (the restart takes a few ticks)
		{15, "release", 1, 0, false, -1}, // not ours
		{16, "restart", 0, 0, false, -1}, // the key lost
		{21, "extend", 2, 4, true, 13},   // repaired: the memory began since the key was set
		{22, "extend", 2, 2, true, 13},   // ours again: kept
		{22, "release", 2, 0, true, -1},  // deleted
		{23, "extend", 2, 4, false, 16},  // gone in the memory the repair set it in: no repair
		{24, "acquire", 3, 4, true, -1},  // free: taken
		{24, "handoff", 3, 4, true, 4},   // ours: replaced by the waiter's, for its ttl
		{25, "handoff", 3, 4, false, 5},  // another's: untouched
		{25, "handoff", 3, 4, true, 4},   // a re-send: already the waiter's
		{26, "release", 4, 0, true, -1},  // deleted
		{26, "handoff", 4, 3, true, 5},   // free: taken for the waiter
	}
	srv := redistest.StartN(t, 1)[0]
	rc := srv.Client(nil)
	key := "k"
	keys := []any{key, script.WantedKey(key, false), script.PlainMarkerKey}
	tokenOf := func(n int8) string { return "token-" + strconv.Itoa(int(n)) }
	m := model.Master{Born: -1}
	realBorn, modelBorn := make([]int64, len(steps)), make([]int8, len(steps)) // after each step
	start := time.Now()
	ticks := func() int8 { return int8(time.Since(start) / tick) }
	for i, st := range steps {
		time.Sleep(time.Until(start.Add(time.Duration(st.at)*tick + tick/4))) // each step a quarter into its tick: the test's clock
		if now := ticks(); now != st.at {
			t.Fatalf("step %d began at tick %d, not %d: the machine is too slow for a %v tick", i, now, st.at, tick)
		}
		var yes bool
		var age int64 = -1
		var v []int64
		var err error
		switch st.op {
		case "acquire":
			v, err = int64s(master.Script(bg, goredis.New(rc), script.Acquire.Evalsha(3, append(keys, tokenOf(st.token), int(st.ttl)*int(tick/time.Millisecond), "", "", "1", "0")...)))
			if err == nil {
				yes, age = v[0] == 1, v[1]
			}
		case "extend":
			since := "0"
			if st.since >= 0 {
				since = strconv.FormatInt(realBorn[st.since], 10)
			}
			v, err = int64s(master.Script(bg, goredis.New(rc), script.Extend.Evalsha(3, append(keys, tokenOf(st.token), int(st.ttl)*int(tick/time.Millisecond), "1", since, "0")...)))
			if err == nil {
				yes, age = v[0] >= 1, v[1] // 2: repaired
			}
		case "release":
			var n int64
			n, err = master.Script(bg, goredis.New(rc), script.Release.Evalsha(2, key, script.WantedKey(key, false), tokenOf(st.token), "", "", "0")).Int64()
			yes = n != 0
		case "handoff":
			v, err = int64s(master.Script(bg, goredis.New(rc), script.HandOff.Evalsha(3, append(keys, tokenOf(st.token), tokenOf(int8(st.since)), int(st.ttl)*int(tick/time.Millisecond), "", "", "1", "0", "0", "0")...)))
			if err == nil {
				yes, age = v[0] >= 1, v[2]          // 2: replaced, 1: taken free (or a re-send)
				v = []int64{v[0], v[2], v[3], v[4]} // as acquire's: yes, age, longest, born
			}
		case "restart":
			srv.Restart()
			rc = srv.Client(nil)
		}
		if err != nil {
			t.Fatalf("step %d %+v: %v", i, st, err)
		}
		if len(v) > 3 {
			realBorn[i] = v[3]
		} else if i > 0 {
			realBorn[i] = realBorn[i-1]
		}
		var myes bool
		var mage int8 = -1
		switch st.op {
		case "acquire":
			myes, mage = m.Acquire(st.at, st.token, st.ttl, true)
		case "extend":
			since := int8(-1)
			if st.since >= 0 {
				since = modelBorn[st.since]
			}
			myes, mage = m.Extend(st.at, st.token, st.ttl, true, since)
		case "release":
			myes = m.Release(st.at, st.token)
		case "handoff":
			myes, mage = m.HandOff(st.at, st.token, int8(st.since), st.ttl, true)
		case "restart":
			m.Restart()
		}
		modelBorn[i] = m.Born
		if myes != st.wantModel {
			t.Fatalf("step %d %+v: the rendering voted %v; the table says %v", i, st, myes, st.wantModel)
		}
		what := fmt.Sprintf("step %d (tick %d: %s by token %d, ttl %d)", i, st.at, st.op, st.token, st.ttl)
		if yes != myes {
			t.Fatalf("%s: redis voted %v, the model %v", what, yes, myes)
		}
		if age >= 0 && mage >= 0 && abs(age/int64(tick/time.Millisecond)-int64(mage)) > 1 {
			t.Fatalf("%s: redis reported a memory %d ms old, the model %d ticks", what, age, mage)
		}
		val, err := rc.Get(bg, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		want := ""
		if m.Val != 0 && m.Exp > st.at {
			want = tokenOf(m.Val)
		}
		if val != want {
			t.Fatalf("%s: redis holds %q, the model %q", what, val, want)
		}
		if want == "" {
			continue
		}
		pttl, err := rc.PTTL(bg, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		left := time.Duration(m.Exp-st.at)*tick - tick/4 // the model's expiry, from this step's moment
		if d := pttl - left; d > tick || d < -tick {
			t.Fatalf("%s: redis's key lives %v more, the model's %v", what, pttl, left)
		}
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// int64s reads r, an array of integers.
func int64s(r driver.Reply) ([]int64, error) {
	vals, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(vals))
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("element %d of %v is not an integer", i, vals)
		}
		out[i] = n
	}
	return out, nil
}
