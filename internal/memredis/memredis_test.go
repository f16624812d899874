package memredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redistest"
)

var bg = context.Background()

// TestMain fails the run if any goroutine, the servers' or go-redis's,
// outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client returns a go-redis client with default options for addr, closed
// when the test ends.
func client(t *testing.T, addr string, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// do runs a command and renders its result or error as one string.
func do(c *redis.Client, args ...any) string {
	v, err := c.Do(bg, args...).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) {
			return "nil"
		}
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%v", v)
}

func expect(t *testing.T, c *redis.Client, want string, args ...any) {
	t.Helper()
	if got := do(c, args...); got != want {
		t.Errorf("%v = %q, want %q", args, got, want)
	}
}

func TestHandshakeAndServerCommands(t *testing.T) {
	s, other := RunT(t), RunT(t)
	c := client(t, s.Addr(), 0) // default options: HELLO 3 first, then RESP2
	expect(t, c, "PONG", "PING")
	expect(t, c, "hi", "PING", "hi")
	expect(t, c, "error: ERR unknown command 'HELLO'", "HELLO", 3) // go-redis's cue for RESP2
	expect(t, c, "error: ERR unknown command 'NOSUCH'", "NOSUCH", "x")
	expect(t, c, "error: ERR wrong number of arguments for 'get' command", "GET")
	expect(t, c, "OK", "CLIENT", "SETNAME", "me")
	id, err := c.ClientID(bg).Result()
	if err != nil || id <= 0 {
		t.Fatalf("CLIENT ID = %d, %v", id, err)
	}
	info, err := c.ClientInfo(bg).Result()
	if err != nil || info.ID != id || info.Name != "me" || info.DB != 0 {
		t.Fatalf("CLIENT INFO = %+v, %v", info, err)
	}
	runID := func(s *Server) string {
		text, err := client(t, s.Addr(), 0).Info(bg, "server").Result()
		if err != nil || !strings.HasPrefix(text, "# Server\r\nredis_version:7.2.0\r\n") {
			t.Fatalf("INFO server = %q, %v", text, err)
		}
		return regexp.MustCompile(`run_id:([0-9a-f]{40})\r\n`).FindStringSubmatch(text)[1]
	}
	first := runID(s)
	if first == runID(other) {
		t.Fatal("two servers share a run_id")
	}
	if err := s.Set("k", "v"); err != nil {
		t.Fatal(err)
	}
	s.SetError("LOADING Redis is loading the dataset in memory")
	s.Close()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if runID(s) == first || !s.Exists("k") {
		t.Fatal("Restart kept the run_id or the error, or lost the data")
	}
	expect(t, c, "error: ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?", "AUTH", "pw")
}

func TestStringCommands(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	expect(t, c, "OK", "SET", "k", "a", "NX", "PX", 10000)
	expect(t, c, "nil", "SET", "k", "b", "NX", "PX", 10000)
	expect(t, c, "a", "GET", "k")
	expect(t, c, "a", "SET", "k", "b", "XX", "GET")
	expect(t, c, "nil", "SET", "new", "b", "XX")
	expect(t, c, "error: ERR syntax error", "SET", "k", "b", "NX", "XX")
	expect(t, c, "error: ERR invalid expire time in 'set' command", "SET", "k", "b", "PX", 0)
	expect(t, c, "-1", "PTTL", "k") // SET without PX cleared the deadline
	expect(t, c, "1", "PEXPIRE", "k", 5000)
	if pttl := c.PTTL(bg, "k").Val(); pttl <= 4*time.Second || pttl > 5*time.Second {
		t.Errorf("PTTL = %v", pttl)
	}
	expect(t, c, "5", "TTL", "k")
	expect(t, c, "OK", "SET", "k", "c", "KEEPTTL")
	expect(t, c, "5", "TTL", "k")
	expect(t, c, "c", "GET", "k")
	expect(t, c, "1", "EXPIRE", "k", 60)
	expect(t, c, "0", "PEXPIRE", "absent", 5000)
	expect(t, c, "-2", "PTTL", "absent")
	expect(t, c, "string", "TYPE", "k")
	expect(t, c, "none", "TYPE", "absent")
	expect(t, c, "OK", "SET", "key:2", "x")
	expect(t, c, "OK", "SET", "a/b", "x")
	expect(t, c, "[k key:2]", "KEYS", "k*")
	expect(t, c, "[a/b]", "KEYS", "?/[ab]")
	expect(t, c, "3", "DBSIZE")
	expect(t, c, "2", "EXISTS", "k", "k", "absent")
	expect(t, c, "2", "DEL", "k", "a/b", "absent")
	if !reflect.DeepEqual(s.Keys(), []string{"key:2"}) {
		t.Errorf("Keys() = %q", s.Keys())
	}
	expect(t, c, "OK", "FLUSHDB")
	expect(t, c, "0", "DBSIZE")
}

func TestExpiry(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	expect(t, c, "OK", "SET", "k", "v", "PX", 10000)
	s.FastForward(9 * time.Second)
	if ttl := s.TTL("k"); ttl <= 0 || ttl > time.Second {
		t.Fatalf("TTL after 9s of 10s = %v", ttl)
	}
	s.FastForward(time.Second)
	expect(t, c, "nil", "GET", "k")
	if s.Exists("k") || s.TTL("k") != 0 {
		t.Fatal("key outlived its deadline")
	}
	// Go API: Set clears a deadline, SetTTL sets one.
	if err := s.Set("g", "v"); err != nil {
		t.Fatal(err)
	}
	if s.TTL("g") != 0 {
		t.Fatal("Set left a deadline")
	}
	s.SetTTL("g", time.Minute)
	if v, err := s.Get("g"); v != "v" || err != nil || s.TTL("g") <= 59*time.Second {
		t.Fatalf("Get = %q, %v; TTL = %v", v, err, s.TTL("g"))
	}
	// The clock runs in real time too, until frozen.
	expect(t, c, "OK", "SET", "r", "v", "PX", 20)
	time.Sleep(40 * time.Millisecond)
	expect(t, c, "0", "EXISTS", "r")
	if _, err := s.Get("r"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("Get of an expired key: %v", err)
	}
	s.FreezeClock()
	expect(t, c, "OK", "SET", "f", "v", "PX", 30)
	time.Sleep(40 * time.Millisecond)
	expect(t, c, "30", "PTTL", "f")
	s.FastForward(29 * time.Millisecond)
	if ttl := s.TTL("f"); ttl != time.Millisecond {
		t.Fatalf("TTL on a frozen clock = %v, want 1ms", ttl)
	}
	s.FastForward(time.Millisecond)
	expect(t, c, "0", "EXISTS", "f")
}

func TestScripts(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	seen := make(chan string, 10)
	s.SetPreHook(func(cmd string, _ []string) error {
		if strings.HasPrefix(cmd, "EVAL") {
			seen <- cmd
		}
		return nil
	})
	const source = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])"
	script := redis.NewScript(source)
	if v, err := script.Run(bg, c, []string{"k"}, "v", 1000).Result(); v != "OK" || err != nil {
		t.Fatalf("Script.Run = %v, %v", v, err)
	}
	s.SetPreHook(nil)
	if first, second := <-seen, <-seen; first != "EVALSHA" || second != "EVAL" {
		t.Fatalf("commands %s, %s; want NOSCRIPT's fallback from EVALSHA to EVAL", first, second)
	}
	expect(t, c, "[1]", "SCRIPT", "EXISTS", script.Hash())
	expect(t, c, "OK", "EVALSHA", script.Hash(), 1, "k", "w", 1000) // EVAL cached it
	expect(t, c, "OK", "SCRIPT", "FLUSH")
	expect(t, c, "error: NOSCRIPT No matching script. Please use EVAL.", "EVALSHA", script.Hash(), 1, "k")
	expect(t, c, script.Hash(), "SCRIPT", "LOAD", source)

	expect(t, c, "[1 2 3 -2 a 1 <nil> fine]", "EVAL", "return {1, 2, 3.7, -2.5, 'a', true, false, {ok='fine'}, nil, 9}", 0)
	expect(t, c, "[v false 7 [k] ok]", "EVAL", `local set = redis.call('SET', KEYS[1], 'x')
		return {ARGV[1], tostring(redis.call('GET', KEYS[2])), redis.call('PEXPIRE', KEYS[1], 60000) * 7,
			redis.call('KEYS', 'k'), set.ok == 'OK' and 'ok' or 'no'}`, 2, "k", "absent", "v")
	src0 := "return redis.call('GET', 'k')"
	expect(t, c, "error: ERR script tried accessing undeclared key script: "+sha1hex(src0)+", on @user_script:1.", "EVAL", src0, 0)
	expect(t, c, "ERR script tried accessing undeclared key", "EVAL", "return redis.pcall('DEL', KEYS[1], 'other').err", 1, "k")
	expect(t, c, "ERR Wrong number of args calling Redis command from script", "EVAL", "return redis.pcall('GET').err", 0)
	src := "local x = 1\nreturn redis.call('GET')"
	expect(t, c, "error: ERR Wrong number of args calling Redis command from script script: "+sha1hex(src)+", on @user_script:2.", "EVAL", src, 0)
	expect(t, c, "error: My Error", "EVAL", "return redis.error_reply('My Error')", 0)
	expect(t, c, "error: ERR oops", "EVAL", "return redis.error_reply('oops')", 0)
	expect(t, c, "fine", "EVAL", "return redis.status_reply('fine')", 0)
	src = "return redis.call('EVAL', 'return 1', 0)"
	expect(t, c, "error: ERR This Redis command is not allowed from script script: "+sha1hex(src)+", on @user_script:1.", "EVAL", src, 0)
	expect(t, c, "error: ERR Number of keys can't be greater than number of args", "EVAL", "return 1", 2, "k")
	expect(t, c, "nil", "EVAL", "return nil", 0)
	expect(t, c, "OK", "EVAL", "return redis.call('SELECT', 3)", 0)
	expect(t, c, "x", "GET", "k") // SELECT in a script does not outlive it
}

func TestPubSub(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	sub := c.Subscribe(bg, "ch", "other")
	defer sub.Close()
	for range 2 {
		if _, err := sub.Receive(bg); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	if n := s.PubSubNumSub("ch", "none"); n["ch"] != 1 || n["none"] != 0 {
		t.Fatalf("PubSubNumSub = %v", n)
	}
	if n, err := c.PubSubNumSub(bg, "ch", "none").Result(); err != nil || n["ch"] != 1 || n["none"] != 0 {
		t.Fatalf("PUBSUB NUMSUB = %v, %v", n, err)
	}
	expect(t, c, "1", "PUBLISH", "ch", "hello")
	expect(t, c, "1", "EVAL", "return redis.call('PUBLISH', KEYS[1], ARGV[1])", 1, "ch", "from lua")
	if err := sub.Ping(bg, "p"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []any{
		&redis.Message{Channel: "ch", Payload: "hello"},
		&redis.Message{Channel: "ch", Payload: "from lua"},
		&redis.Pong{Payload: "p"},
	} {
		got, err := sub.ReceiveTimeout(bg, time.Second)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("received %#v, %v; want %#v", got, err, want)
		}
	}
	if err := sub.Unsubscribe(bg); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if m, err := sub.ReceiveTimeout(bg, time.Second); err != nil || m.(*redis.Subscription).Kind != "unsubscribe" {
			t.Fatalf("after UNSUBSCRIBE: %#v, %v", m, err)
		}
	}
	expect(t, c, "0", "PUBLISH", "ch", "nobody")
}

// A raw connection shows subscribe mode's RESP2 arrays byte for byte.
func TestSubscribeModeReplies(t *testing.T) {
	s := RunT(t)
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	send := func(cmd, want string) {
		t.Helper()
		fmt.Fprintf(nc, "%s\r\n", cmd)
		got := make([]byte, len(want))
		_ = nc.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
			t.Fatalf("%s: got %q, %v; want %q", cmd, got, err, want)
		}
	}
	send("SUBSCRIBE a", "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n")
	send("PING", "*2\r\n$4\r\npong\r\n$0\r\n\r\n")
	send("GET a", "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")
	s.mu.Lock()
	s.publish("a", "m")
	s.mu.Unlock()
	send("UNSUBSCRIBE", "*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nm\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n")
	send("UNSUBSCRIBE", "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n")
	send("QUIT", "+OK\r\n")
}

func TestSelectIsolation(t *testing.T) {
	s := RunT(t)
	db0, db3 := client(t, s.Addr(), 0), client(t, s.Addr(), 3)
	expect(t, db3, "OK", "SET", "k", "three")
	expect(t, db0, "nil", "GET", "k")
	expect(t, db0, "OK", "SET", "k", "zero")
	expect(t, db3, "three", "GET", "k")
	if v, _ := s.Get("k"); v != "zero" {
		t.Fatalf("Get reads database 0: %q", v)
	}
	expect(t, db0, "error: ERR DB index is out of range", "SELECT", 16)
}

func TestSetErrorAndCommandCount(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	expect(t, c, "PONG", "PING") // the handshake is done
	before := s.CommandCount()
	expect(t, c, "nil", "GET", "k")
	expect(t, c, "0", "EVAL", "redis.call('GET', KEYS[1]) return 0", 1, "k")
	if n := s.CommandCount() - before; n != 2 {
		t.Fatalf("counted %d commands, want 2: GET and EVAL, not the script's GET", n)
	}
	s.SetError("LOADING Redis is loading the dataset in memory")
	expect(t, c, "error: LOADING Redis is loading the dataset in memory", "GET", "k")
	s.SetError("")
	expect(t, c, "nil", "GET", "k")
	if n := s.CommandCount() - before; n != 3 {
		t.Fatalf("counted %d commands, want 3: not the refused one", n)
	}
}

func TestPreHook(t *testing.T) {
	s := RunT(t)
	c := client(t, s.Addr(), 0)
	expect(t, c, "PONG", "PING")
	arrived, gate := make(chan []string, 1), make(chan struct{})
	s.SetPreHook(func(cmd string, args []string) error {
		switch cmd {
		case "GET":
			arrived <- args
			<-gate
		case "DEL":
			return errors.New("ERR disk on fire")
		}
		return nil
	})
	done := make(chan string)
	go func() { done <- do(c, "GET", "k") }()
	if args := <-arrived; !reflect.DeepEqual(args, []string{"k"}) {
		t.Fatalf("hook saw %q", args)
	}
	select {
	case got := <-done:
		t.Fatalf("GET answered %q while held", got)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if got := <-done; got != "nil" {
		t.Fatalf("GET after release = %q", got)
	}
	expect(t, c, "error: ERR disk on fire", "DEL", "k")
}

// Close ends every goroutine of the server, including those of clients
// that stay connected and subscribed.
func TestCloseEndsEverything(t *testing.T) {
	baseline := runtime.NumGoroutine()
	s, err := Run()
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for _, cmd := range []string{"PING", "SUBSCRIBE a", "GET k"} {
		nc, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "%s\r\n", cmd)
		if _, err := bufio.NewReader(nc).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	s.Close()
	for _, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatalf("a connection still reads %d bytes after Close", n)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLibraryScriptsMatchRedis runs the library's scripts, and a few
// conversion and error cases, through go-redis against memredis and a
// real redis-server, and requires the same replies and notices from both.
func TestLibraryScriptsMatchRedis(t *testing.T) {
	mem := librarySequence(t, RunT(t).Addr())
	if _, err := redistest.Binary(); err != nil || testing.Short() {
		t.Skipf("memredis half passed; real redis-server half skipped: short=%v, %v", testing.Short(), err)
	}
	real := librarySequence(t, redistest.Start(t).Addr)
	t.Logf("replies and notices:\n%s", strings.Join(mem, "\n"))
	for i := range max(len(mem), len(real)) {
		if i >= len(mem) || i >= len(real) || mem[i] != real[i] {
			t.Errorf("step %d differs:\nmemredis: %q\nredis:    %q", i, at(mem, i), at(real, i))
		}
	}
}

func at(ss []string, i int) string {
	if i < len(ss) {
		return ss[i]
	}
	return "(missing)"
}

// libraryScripts loads the library's scripts from internal/script/lua/, each after
// token.lua and the voting ones after memory.lua too, as lua.go does.
func libraryScripts(t *testing.T) map[string]*redis.Script {
	read := func(name string) string {
		src, err := os.ReadFile("../script/lua/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return string(src)
	}
	token, memory := read("token"), read("memory")
	scripts := map[string]*redis.Script{
		"release": redis.NewScript(token + read("release")),
		"fence":   redis.NewScript(token + read("fence")),
	}
	for _, name := range []string{"acquire", "extend", "handoff"} {
		scripts[name] = redis.NewScript(token + memory + read(name))
	}
	return scripts
}

// guardOn reports whether a library script's arguments turn the restart
// guard on (internal/script/lua/*.lua: ARGV[5] of acquire, ARGV[3] of extend, ARGV[6] of
// handoff is '1'), so that it declares the marker.
func guardOn(name string, args []any) bool {
	i := map[string]int{"acquire": 4, "extend": 2, "handoff": 5}[name]
	return i > 0 && len(args) > i && fmt.Sprint(args[i]) == "1"
}

// differentialCommands are conversion and error cases whose replies
// memredis must give exactly as Redis does.
var differentialCommands = [][]any{
	{"EVAL", "return {1, 2, 3.7, -2.5, 'a', true, false, {ok='fine'}, nil, 9}", 0},
	{"EVAL", "return redis.pcall('SET', KEYS[1])", 1, "k"},
	{"EVAL", "local r = redis.call('SET', KEYS[1], 'v', 'NX', 'PX', 100)\nreturn {r.ok, redis.call('SET', KEYS[1], 'v', 'NX')}", 1, "k"},
	{"EVAL", "return redis.call('SET', KEYS[1])", 1, "k"},
	{"EVAL", "return redis.call('SET', KEYS[1], 'v', 'PX', 0)", 1, "k"},
	{"EVAL", "return redis.call('NOSUCH')", 0},
	{"EVAL", "return redis.call()", 0},
	{"EVAL", "return redis.call({})", 0},
	{"EVAL", "return redis.error_reply('My Error')", 0},
	{"EVAL", "return {redis.call('GET', KEYS[1]), 1, redis.call('PTTL', KEYS[1])}", 1, "absent"},
	{"EVAL", "return redis.call('SUBSCRIBE', 'x')", 0},
	{"EVAL", "return 1", -1},
	{"EVAL", "return nosuch()", 0},
	{"EVAL", "x = 1", 0},
	{"EVAL", "return error('boom')", 0},
	{"EVAL", "local ok, e = pcall(redis.call, 'GET'); return {tostring(ok), e}", 0},
	{"EVAL", "return {pcall(error, {err='t'})}", 0},
	{"EVAL", "return {pcall(function(a) return a, 2 end, 'one')}", 0},
	{"EVAL", "return {redis.sha1hex('a'), -0.9, redis.call('SET', KEYS[1], '1', 'GET')}", 1, "k"},
	{"EVALSHA", "0000000000000000000000000000000000000000", 0},
	{"SET", "k", "v", "PX", "x"},
	{"SET", "k", "v", "EX", 10, "PX", 10},
	{"SET", "s", "v", "NX", "GET"},
	{"SET", "s", "w", "XX", "GET", "EX", 100},
	{"TTL", "s"},
	{"SET", "s", "w2", "KEEPTTL"},
	{"TTL", "s"},
	{"GET", "s"},
	{"SET", "s", "w", "KEEPTTL", "PX", 10},
	{"SET", "s", "w", "PX", 10, "KEEPTTL"},
	{"TYPE", "s"},
	{"PEXPIRE", "s", 0},
	{"EXISTS", "s", "s"},
	{"DEL", "absent"},
	{"PING", "x"},
	{"SELECT", 99},
	{"PUBSUB", "NUMSUB", "notice", "none"},
}

// librarySequence runs the same calls against the server at addr and
// returns their rendered replies, then the notices a subscriber heard.
func librarySequence(t *testing.T, addr string) []string {
	c := client(t, addr, 0)
	sub := c.Subscribe(bg, "notice")
	defer sub.Close()
	if _, err := sub.Receive(bg); err != nil {
		t.Fatal(err)
	}
	scripts := libraryScripts(t)
	var out []string
	// run runs a script about lock key key: its declared keys are key and
	// its wanted key, and, with the guard on (the arguments name it), the
	// marker.
	run := func(name, key string, args ...any) {
		keys := []string{key, key + ":redlock-wanted"}
		if guardOn(name, args) {
			keys = append(keys, "redlock:memory")
		}
		if name == "release" {
			keys = keys[:2]
		}
		v, err := scripts[name].Run(bg, c, keys, args...).Result()
		out = append(out, fmt.Sprintf("%s %s %v: %v %v", name, key, args, v, err))
	}
	ttlAbove := func(key string, ms int64) {
		pttl := c.PTTL(bg, key).Val()
		out = append(out, fmt.Sprintf("pttl %s > %dms: %v", key, ms, pttl > time.Duration(ms)*time.Millisecond))
	}
	run("acquire", "k", "A", 10000, "", "")
	run("acquire", "k", "B", 10000, "notice", "taken-b")
	out = append(out, "the holder's value: "+do(c, "GET", "k"), "marked as wanted: "+do(c, "GET", "k:redlock-wanted"))
	ttlAbove("k", 9000)
	ttlAbove("k:redlock-wanted", 9000)
	run("acquire", "k", "B", 10000, "notice", "taken-b")
	out = append(out, "marked once: "+do(c, "GET", "k:redlock-wanted"))
	run("acquire", "k", "A", 10000, "notice", "resent-a")
	run("acquire", "k2", "A", 5000, "notice", "taken-k2")
	run("extend", "k", "A", 20000)
	ttlAbove("k", 10000)
	ttlAbove("k:redlock-wanted", 10000)
	run("extend", "k", "A", 5000)
	ttlAbove("k", 10000)
	run("extend", "k", "B", 50000)
	run("extend", "absent", "A", 50000)
	run("handoff", "k", "A", "C", 30000, "notice", "to-c")
	run("handoff", "k", "A", "D", 30000, "", "")
	run("handoff", "k", "X", "C", 30000, "notice", "resent-c")
	run("handoff", "k3", "X", "E", 1000, "notice", "to-e")
	ttlAbove("k3", 0)
	run("release", "k", "A", "notice", "no")
	run("release", "k", "C", "notice", "released-c")
	run("release", "k", "C", "", "")
	run("release", "k3", "E", "", "")
	run("release", "k2", "A", "", "")
	// The restart guard on, for a memory marker pinned to a fixed birth
	// (a real one holds the server's clock, which differs between the two
	// runs), that the Client says it knows: the one-integer replies.
	out = append(out, "set marker: "+do(c, "SET", "redlock:memory", "1000 60000"))
	run("acquire", "g", "A", 10000, "", "", "1", "1000")
	run("acquire", "g", "B", 10000, "notice", "no", "1", "1000")
	run("extend", "g", "A", 20000, "1", "0", "1000")
	run("extend", "g", "B", 20000, "1", "0", "1000")
	run("handoff", "g", "A", "F", 30000, "", "", "1", "1000")
	run("release", "g", "F", "", "")
	// A trusted hand-off of a key nobody else wanted: no marker read, no
	// notice; of a wanted one: the notice.
	out = append(out, "set marker: "+do(c, "SET", "redlock:memory", "1000 60000"))
	run("acquire", "q", "A", 10000, "", "", "1", "1000")
	run("handoff", "q", "A", "G", 10000, "notice", "quiet-g", "1", "1000", "1")
	run("acquire", "q", "B", 10000, "", "", "1", "1000")
	run("handoff", "q", "G", "H", 10000, "notice", "wanted-h", "1", "1000", "1")
	fence, err := scripts["fence"].Run(bg, c, []string{"q", "q:redlock-fence"}, "H", "").Text()
	out = append(out, fmt.Sprintf("fence for the holder of a wanted key: %v %v", len(fence) > 10, err))
	run("release", "q", "H", "", "")
	for _, args := range differentialCommands {
		label := strings.TrimSpace(fmt.Sprintln(args...))
		out = append(out, label[:min(len(label), 50)]+": "+do(c, args...))
	}
	for {
		m, err := sub.ReceiveTimeout(bg, 200*time.Millisecond)
		if err != nil {
			break
		}
		out = append(out, fmt.Sprintf("notice %v", m))
	}
	return out
}
