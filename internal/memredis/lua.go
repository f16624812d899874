// Scripting: EVAL, EVALSHA and SCRIPT, the redis table a
// script sees (call, pcall, error_reply, status_reply, sha1hex, log), and
// the conversions between Lua values and replies, by Redis's rules.

package memredis

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// chunkName is the script's name in Lua's messages, as in Redis 7.
const chunkName = "user_script"

func sha1hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// compiled caches every server's compiled scripts by SHA1, for the whole
// process: a compiled prototype is read-only and shared by the Lua states
// that run it. Compiling the library's scripts takes tens of milliseconds
// under -race, more than the short node timeouts some tests use, and
// every test starts new servers.
var compiled sync.Map // string → *lua.FunctionProto

// compile parses and compiles a script's source, caching it by its SHA1:
// the server knows it from now on (EVALSHA).
func (s *Server) compile(src string) (string, *lua.FunctionProto, errReply) {
	sha := sha1hex(src)
	if p, ok := s.scripts[sha]; ok {
		return sha, p, ""
	}
	if p, ok := compiled.Load(sha); ok {
		s.scripts[sha] = p.(*lua.FunctionProto)
		return sha, s.scripts[sha], ""
	}
	chunk, err := parse.Parse(strings.NewReader(src), chunkName)
	if err != nil {
		return "", nil, errReply("ERR Error compiling script (new function): " + err.Error())
	}
	p, err := lua.Compile(chunk, chunkName)
	if err != nil {
		return "", nil, errReply("ERR Error compiling script (new function): " + err.Error())
	}
	compiled.Store(sha, p)
	s.scripts[sha] = p
	return sha, p, ""
}

func cmdEval(s *Server, c *conn, args []string) any {
	sha, p, e := s.compile(args[1])
	if e != "" {
		return e
	}
	return s.runScript(c, sha, p, args[2:])
}

func cmdEvalSHA(s *Server, c *conn, args []string) any {
	sha := strings.ToLower(args[1])
	p, ok := s.scripts[sha]
	if !ok {
		return errReply("NOSCRIPT No matching script. Please use EVAL.")
	}
	return s.runScript(c, sha, p, args[2:])
}

// cmdScript serves SCRIPT LOAD, EXISTS and FLUSH.
func cmdScript(s *Server, _ *conn, args []string) any {
	switch sub := strings.ToUpper(args[1]); {
	case sub == "LOAD" && len(args) == 3:
		sha, _, e := s.compile(args[2])
		if e != "" {
			return e
		}
		return sha
	case sub == "EXISTS" && len(args) > 2:
		found := make([]any, len(args)-2)
		for i, sha := range args[2:] {
			found[i] = int64(0)
			if _, ok := s.scripts[strings.ToLower(sha)]; ok {
				found[i] = int64(1)
			}
		}
		return found
	case sub == "FLUSH" && len(args) <= 3:
		clear(s.scripts)
		return status("OK")
	}
	return errReply(fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for '%s'. Try SCRIPT HELP.", args[1]))
}

// runScript runs a compiled script with args (numkeys, keys..., argv...)
// in a fresh Lua state, its commands as a pseudo-client on c's database.
func (s *Server) runScript(c *conn, sha string, p *lua.FunctionProto, args []string) any {
	n, err := strconv.Atoi(args[0])
	switch {
	case err != nil:
		return errNotInt
	case n < 0:
		return errReply("ERR Number of keys can't be negative")
	case n > len(args)-1:
		return errReply("ERR Number of keys can't be greater than number of args")
	}
	L := newLuaState()
	defer L.Close()
	L.SetGlobal("KEYS", stringsTable(L, args[1:1+n]))
	L.SetGlobal("ARGV", stringsTable(L, args[1+n:]))
	declared := make(map[string]bool, n)
	for _, k := range args[1 : 1+n] {
		declared[k] = true
	}
	L.SetGlobal("redis", s.redisTable(L, &conn{s: s, db: c.db, declared: declared}))
	L.SetGlobal("pcall", L.NewFunction(luaPcall))
	protectGlobals(L)
	L.Push(L.NewFunctionFromProto(p))
	if err := L.PCall(0, 1, nil); err != nil {
		return scriptError(err, sha)
	}
	return luaToReply(L.Get(-1))
}

// newLuaState opens the libraries Redis gives scripts that gopher-lua has.
func newLuaState() *lua.LState {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 1024, RegistryMaxSize: 1 << 20})
	for name, open := range map[string]lua.LGFunction{
		lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable,
		lua.StringLibName: lua.OpenString, lua.MathLibName: lua.OpenMath,
	} {
		L.Push(L.NewFunction(open))
		L.Push(lua.LString(name))
		L.Call(1, 0)
	}
	return L
}

// luaPcall is Lua's pcall as Redis 7 changes it: an error table (as
// redis.call raises) is caught as its err string.
func luaPcall(L *lua.LState) int {
	if err := L.PCall(L.GetTop()-1, lua.MultRet, nil); err != nil {
		var e lua.LValue = lua.LString(err.Error())
		if apiErr := (*lua.ApiError)(nil); errors.As(err, &apiErr) {
			e = apiErr.Object
		}
		if t, ok := e.(*lua.LTable); ok && t.RawGetString("err").Type() == lua.LTString {
			e = t.RawGetString("err")
		}
		L.Push(lua.LFalse)
		L.Push(e)
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// protectGlobals makes reading an undefined global and setting any global
// an error, as Redis 7 does, so that a typo fails instead of being nil.
func protectGlobals(L *lua.LState) {
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckString(2))
		return 0
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	L.SetMetatable(L.G.Global, mt)
}

func stringsTable(L *lua.LState, ss []string) *lua.LTable {
	t := L.CreateTable(len(ss), 0)
	for _, s := range ss {
		t.Append(lua.LString(s))
	}
	return t
}

// redisTable builds the script's redis table; its commands run as pc.
func (s *Server) redisTable(L *lua.LState, pc *conn) *lua.LTable {
	t := L.NewTable()
	t.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return s.luaCall(L, pc, true) }))
	t.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return s.luaCall(L, pc, false) }))
	t.RawSetString("error_reply", L.NewFunction(func(L *lua.LState) int {
		msg := strings.TrimPrefix(L.CheckString(1), "-")
		if !strings.Contains(msg, " ") { // Redis adds a code to a bare message
			msg = "ERR " + msg
		}
		L.Push(field("err", msg))
		return 1
	}))
	t.RawSetString("status_reply", L.NewFunction(func(L *lua.LState) int {
		L.Push(field("ok", L.CheckString(1)))
		return 1
	}))
	t.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString(sha1hex(L.CheckString(1))))
		return 1
	}))
	t.RawSetString("log", L.NewFunction(func(*lua.LState) int { return 0 }))
	for i, level := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		t.RawSetString(level, lua.LNumber(i))
	}
	return t
}

// field returns the table {name = value}: a status or error reply.
func field(name, value string) *lua.LTable {
	t := &lua.LTable{}
	t.RawSetString(name, lua.LString(value))
	return t
}

// luaCall runs redis.call (raise true) or redis.pcall: an error reply is
// raised as the table {err=...}, or returned as it.
func (s *Server) luaCall(L *lua.LState, pc *conn, raise bool) int {
	args := make([]string, L.GetTop())
	var reply any
	for i := range args {
		switch v := L.Get(i + 1).(type) {
		case lua.LString:
			args[i] = string(v)
		case lua.LNumber:
			args[i] = v.String()
		default:
			reply = errReply("ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	switch {
	case len(args) == 0:
		reply = errReply("ERR Please specify at least one argument for this redis lib call")
	case reply != nil:
	case undeclared(pc.declared, args):
		reply = errReply("ERR script tried accessing undeclared key")
	default:
		reply = s.execScript(pc, args)
	}
	if e, ok := reply.(errReply); ok {
		t := field("err", string(e))
		if raise {
			t.RawSetString("where", lua.LString(L.Where(1)))
			L.Error(t, 0)
		}
		L.Push(t)
		return 1
	}
	L.Push(replyToLua(reply))
	return 1
}

// undeclared reports whether command args touch a key that the script did
// not declare in KEYS. Redis's scripting contract requires every key to be
// declared; Redis itself checks it only for Cluster routing and ACLs, while
// servers such as Dragonfly refuse an undeclared key outright. This server
// refuses it, as Dragonfly does, so that tests catch a script that breaks
// the contract.
func undeclared(declared map[string]bool, args []string) bool {
	var keys []string
	switch strings.ToLower(args[0]) {
	case "del", "exists", "unlink", "mget", "touch":
		keys = args[1:]
	case "get", "set", "pexpire", "expire", "pttl", "ttl", "incr", "incrby", "type", "getset", "setnx", "append", "strlen":
		keys = args[1:min(2, len(args))]
	}
	for _, k := range keys {
		if !declared[k] {
			return true
		}
	}
	return false
}

// scriptError is the reply to a script that raised an error, in Redis 7's
// form: "<error> script: <sha>, on @user_script:<line>."
func scriptError(err error, sha string) any {
	var apiErr *lua.ApiError
	if !errors.As(err, &apiErr) {
		return errReply("ERR " + err.Error())
	}
	msg, where := "ERR "+apiErr.Object.String(), apiErr.Object.String()
	if t, ok := apiErr.Object.(*lua.LTable); ok {
		msg, where = t.RawGetString("err").String(), t.RawGetString("where").String()
	}
	if rest, ok := strings.CutPrefix(where, chunkName+":"); ok {
		line, _, _ := strings.Cut(rest, ":")
		return errReply(fmt.Sprintf("%s script: %s, on @%s:%s.", msg, sha, chunkName, line))
	}
	return errReply(msg)
}

// luaToReply converts a script's result: a number becomes an integer
// (truncated), a string a bulk string, true 1, false and nil the null
// bulk, a table with an err or ok field an error or status, and any other
// table an array of its elements up to the first nil.
func luaToReply(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v)
	case lua.LString:
		return string(v)
	case lua.LBool:
		if v {
			return int64(1)
		}
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return errReply(e)
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return status(s)
		}
		arr := []any{}
		for i := 1; v.RawGet(lua.LNumber(i)) != lua.LNil; i++ {
			arr = append(arr, luaToReply(v.RawGet(lua.LNumber(i))))
		}
		return arr
	}
	return nil
}

// replyToLua converts a command's reply for a script: an integer becomes
// a number, a bulk string a string, the null bulk false, an array a table,
// and a status the table {ok=...}. Errors are handled by luaCall.
func replyToLua(r any) lua.LValue {
	switch r := r.(type) {
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case status:
		return field("ok", string(r))
	case []any:
		t := &lua.LTable{}
		for _, e := range r {
			t.Append(replyToLua(e))
		}
		return t
	}
	return lua.LFalse
}
