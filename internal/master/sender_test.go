package master

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/redlock-go/redlock/driver"
)

// echoConn answers each command of a DoMulti with its position in it, and
// records what it was sent.
type echoConn struct {
	driver.Conn
	sent [][]any
}

func (c *echoConn) DoMulti(_ context.Context, cmds ...[]any) []driver.Reply {
	c.sent = cmds
	out := make([]driver.Reply, len(cmds))
	for i := range cmds {
		out[i] = driver.Reply{Val: int64(i)}
	}
	return out
}

// TestPipelineSendsQuickCommandsAndMapsTheirReplies: in a batch, a quick
// request goes as its first command, the batch's quick requests that share
// their second command get one, after all of their first ones, and every
// request gets its own replies; a request with no quick commands goes as
// its script.
func TestPipelineSendsQuickCommandsAndMapsTheirReplies(t *testing.T) {
	marker := []any{"get", "marker"}
	other := []any{"get", "other"}
	script := []any{"evalsha", "x", 0}
	set := func(k string) []any { return []any{"set", k} }
	reqs := []*request{
		{args: script},
		{args: script, quick: &[2][]any{set("a"), marker}},
		{args: script, quick: &[2][]any{set("b"), nil}},
		{args: script, quick: &[2][]any{set("c"), marker}},
		{args: script, quick: &[2][]any{set("d"), other}},
	}
	c := &echoConn{}
	p := &Pipe{client: c}
	p.pipeline(context.Background(), reqs)

	want := [][]any{script, set("a"), set("b"), set("c"), set("d"), other, marker}
	if !reflect.DeepEqual(c.sent, want) {
		t.Fatalf("sent %v, want %v", c.sent, want)
	}
	wantReplies := []driver.Reply{
		{Val: int64(0)},
		{Val: [2]any{int64(1), int64(6)}},
		{Val: [2]any{int64(2), nil}},
		{Val: [2]any{int64(3), int64(6)}},
		{Val: [2]any{int64(4), int64(5)}},
	}
	for i, r := range reqs {
		if r.reply.Err != nil || !reflect.DeepEqual(r.reply.Val, wantReplies[i].Val) {
			t.Errorf("request %d: reply %#v, want %#v", i, r.reply, wantReplies[i])
		}
	}
}

// TestPairKeepsTheFirstErrorButANil: a quick request's reply is an error
// when either command failed, a nil reply not counting.
func TestPairKeepsTheFirstErrorButANil(t *testing.T) {
	boom := errors.New("boom")
	if r := Pair(driver.Reply{Err: driver.ErrNil}, driver.Reply{Val: "m"}); r.Err != nil || r.Val != [2]any{nil, "m"} {
		t.Errorf("Pair(nil, m) = %#v, want the values nil and m", r)
	}
	if r := Pair(driver.Reply{Val: "OK"}, driver.Reply{Err: boom}); !errors.Is(r.Err, boom) {
		t.Errorf("Pair(OK, boom) = %#v, want boom", r)
	}
	if r := Pair(driver.Reply{Err: boom}, driver.Reply{Val: "m"}); !errors.Is(r.Err, boom) {
		t.Errorf("Pair(boom, m) = %#v, want boom", r)
	}
}
