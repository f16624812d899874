// The command table, the checks every command passes
// (arity, pub/sub mode, scripts), and the connection and server commands:
// PING, ECHO, SELECT, CLIENT, AUTH, QUIT, INFO, TIME, DBSIZE, FLUSHDB,
// FLUSHALL.
// keys.go, lua.go and pubsub.go hold the others.

package memredis

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A command is one entry of the command table. arity counts the name, as
// Redis does: n means exactly n arguments, -n at least n.
type command struct {
	arity    int
	run      func(s *Server, c *conn, args []string) any
	noScript bool // refused inside scripts
	subMode  bool // allowed on a connection in subscribe mode
}

// commands is filled by init: the table refers to handlers that run
// commands through it (scripts), which an initializer may not.
var commands map[string]command

func init() {
	commands = map[string]command{
		"PING":     {arity: -1, run: cmdPing, subMode: true},
		"ECHO":     {arity: 2, run: cmdEcho},
		"SELECT":   {arity: 2, run: cmdSelect},
		"CLIENT":   {arity: -2, run: cmdClient, noScript: true},
		"AUTH":     {arity: -2, run: cmdAuth, noScript: true},
		"QUIT":     {arity: -1, run: cmdQuit, noScript: true, subMode: true},
		"INFO":     {arity: -1, run: cmdInfo},
		"TIME":     {arity: 1, run: cmdTime},
		"DBSIZE":   {arity: 1, run: cmdDBSize},
		"FLUSHDB":  {arity: -1, run: cmdFlushDB},
		"FLUSHALL": {arity: -1, run: cmdFlushAll},

		"GET":     {arity: 2, run: cmdGet},
		"SET":     {arity: -3, run: cmdSet},
		"DEL":     {arity: -2, run: cmdDel},
		"INCR":    {arity: 2, run: cmdIncr},
		"EXISTS":  {arity: -2, run: cmdExists},
		"KEYS":    {arity: 2, run: cmdKeys},
		"TYPE":    {arity: 2, run: cmdType},
		"PTTL":    {arity: 2, run: cmdTTL(time.Millisecond)},
		"TTL":     {arity: 2, run: cmdTTL(time.Second)},
		"PEXPIRE": {arity: 3, run: cmdExpire(time.Millisecond)},
		"EXPIRE":  {arity: 3, run: cmdExpire(time.Second)},

		"EVAL":    {arity: -3, run: cmdEval, noScript: true},
		"EVALSHA": {arity: -3, run: cmdEvalSHA, noScript: true},
		"SCRIPT":  {arity: -2, run: cmdScript, noScript: true},

		"PUBLISH":     {arity: 3, run: cmdPublish},
		"PUBSUB":      {arity: -2, run: cmdPubSub},
		"SUBSCRIBE":   {arity: -2, run: cmdSubscribe, noScript: true, subMode: true},
		"UNSUBSCRIBE": {arity: -1, run: cmdUnsubscribe, noScript: true, subMode: true},
	}
}

// Errors with Redis's texts.
const (
	errSyntax = errReply("ERR syntax error")
	errNotInt = errReply("ERR value is not an integer or out of range")
)

// arityOK reports whether n arguments, the name included, fit cmd.
func (cmd command) arityOK(n int) bool {
	return n == cmd.arity || cmd.arity < 0 && n >= -cmd.arity
}

// execClient runs a client's command under s.mu and returns its reply.
func (s *Server) execClient(c *conn, name string, args []string) any {
	cmd, ok := commands[name]
	switch {
	case s.errMsg != "":
		return errReply(s.errMsg)
	case !ok:
		return errReply(fmt.Sprintf("ERR unknown command '%s'", args[0]))
	case !cmd.arityOK(len(args)):
		return errReply(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(name)))
	case len(c.subs) > 0 && !cmd.subMode:
		return errReply(fmt.Sprintf("ERR Can't execute '%s': only (P|S)SUBSCRIBE / "+
			"(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context", strings.ToLower(name)))
	}
	s.count++
	return cmd.run(s, c, args)
}

// execScript runs a command a script called, as the pseudo-client c.
func (s *Server) execScript(c *conn, args []string) any {
	cmd, ok := commands[strings.ToUpper(args[0])]
	switch {
	case !ok:
		return errReply("ERR Unknown Redis command called from script")
	case cmd.noScript:
		return errReply("ERR This Redis command is not allowed from script")
	case !cmd.arityOK(len(args)):
		return errReply("ERR Wrong number of args calling Redis command from script")
	}
	return cmd.run(s, c, args)
}

func cmdPing(_ *Server, c *conn, args []string) any {
	if len(args) > 2 {
		return errReply("ERR wrong number of arguments for 'ping' command")
	}
	if len(c.subs) > 0 { // RESP2 subscribe mode: the reply is an array
		if len(args) == 2 {
			return []any{"pong", args[1]}
		}
		return []any{"pong", ""}
	}
	if len(args) == 2 {
		return args[1]
	}
	return status("PONG")
}

func cmdEcho(_ *Server, _ *conn, args []string) any { return args[1] }

func cmdQuit(*Server, *conn, []string) any { return status("OK") }

func cmdAuth(*Server, *conn, []string) any {
	return errReply("ERR AUTH <password> called without any password configured for the default user. " +
		"Are you sure your configuration is correct?")
}

func cmdSelect(_ *Server, c *conn, args []string) any {
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return errNotInt
	}
	if n < 0 || n >= numDBs {
		return errReply("ERR DB index is out of range")
	}
	c.db = n
	return status("OK")
}

// cmdClient serves the CLIENT subcommands go-redis and the library use.
func cmdClient(_ *Server, c *conn, args []string) any {
	sub := strings.ToUpper(args[1])
	switch {
	case sub == "SETNAME" && len(args) == 3:
		c.name = args[2]
		return status("OK")
	case sub == "SETINFO" && len(args) == 4:
		return status("OK")
	case sub == "ID" && len(args) == 2:
		return c.id
	case sub == "INFO" && len(args) == 2:
		return c.infoLine() + "\n"
	}
	return errReply(fmt.Sprintf("ERR unknown subcommand or wrong number of arguments for '%s'. Try CLIENT HELP.", args[1]))
}

// infoLine describes c as CLIENT INFO does.
func (c *conn) infoLine() string {
	flags := "N"
	if len(c.subs) > 0 {
		flags = "P"
	}
	return fmt.Sprintf("id=%d addr=%s laddr=%s fd=8 name=%s age=0 idle=0 flags=%s db=%d sub=%d psub=0 "+
		"multi=-1 cmd=client|info user=default resp=2", c.id, c.nc.RemoteAddr(), c.nc.LocalAddr(), c.name, flags, c.db, len(c.subs))
}

// cmdInfo returns the server section, whatever section is asked for.
func cmdInfo(s *Server, _ *conn, _ []string) any {
	return fmt.Sprintf("# Server\r\nredis_version:7.2.0\r\nredis_mode:standalone\r\nos:memredis\r\n"+
		"run_id:%s\r\ntcp_port:%s\r\nuptime_in_seconds:%d\r\n",
		s.runID, s.addr[strings.LastIndexByte(s.addr, ':')+1:], int(time.Since(s.started).Seconds()))
}

func cmdDBSize(s *Server, c *conn, _ []string) any { return int64(len(s.liveKeys(c.db))) }

func cmdFlushDB(s *Server, c *conn, _ []string) any {
	s.dbs[c.db] = map[string]entry{}
	return status("OK")
}

func cmdFlushAll(s *Server, _ *conn, _ []string) any {
	s.flushAll()
	return status("OK")
}

// cmdTime serves TIME: the server's clock (real time plus FastForward, or
// the frozen clock) as seconds and microseconds.
func cmdTime(s *Server, _ *conn, _ []string) any {
	now := s.now()
	return []any{strconv.FormatInt(now.Unix(), 10), strconv.FormatInt(int64(now.Nanosecond()/1000), 10)}
}
