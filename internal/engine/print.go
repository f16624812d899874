// Printing without tokens: how the exported types that hold a token, or a
// value a master stores, print through fmt and log/slog (issue 37 point 5).
// A token is a capability (see Lock.Token): only Lock.Token hands it out.

package engine

import (
	"fmt"
	"log/slog"
	"strconv"
)

// formatSafe prints s, a value's token-free text, as fmt would print a
// Stringer whose String returns s: %v (with any flags: %+v and %#v print
// no fields) and %s print it, %q quotes it, %x and %X hex-encode it, each
// with the width, precision and flags given. Any other verb prints as fmt
// prints a bad verb, %!d(typ=s), never the value's fields.
func formatSafe(f fmt.State, verb rune, typ, s string) {
	switch verb {
	case 'v':
		verb = 's'
	case 's', 'q', 'x', 'X':
	default:
		fmt.Fprintf(f, "%%!%c(%s=%s)", verb, typ, s)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), s)
}

// String describes the Client: its masters, its quorum and whether it is
// closed. It never includes a token: not those of its waiters, which a
// hand-off makes a lock's, nor those of the locks it gave.
func (c *Client) String() string {
	if c == nil {
		return "<nil>"
	}
	return "redlock.Client{masters: " + strconv.Itoa(len(c.nodes)) + ", quorum: " + strconv.Itoa(c.quorum) +
		", closed: " + strconv.FormatBool(c.isClosed()) + "}"
}

// Format prints the Client as String does, for every verb (%v, %+v, %#v,
// %s, %q, %x, ...): never its fields, so never a token.
func (c *Client) Format(f fmt.State, verb rune) { formatSafe(f, verb, "*redlock.Client", c.String()) }

// LogValue is the Client for log/slog: a group of its masters, quorum and
// whether it is closed; never a token.
func (c *Client) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(slog.Int("masters", len(c.nodes)), slog.Int("quorum", c.quorum),
		slog.Bool("closed", c.isClosed()))
}
