// The RESP2 wire format: reading a client's commands and
// encoding the server's replies.

package memredis

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// A reply is one of: nil (the null bulk string), status (+OK), errReply
// (-ERR ...), int64 (:1), string (a bulk string), []any (an array of
// replies) or multi (several replies to one command, as SUBSCRIBE a b
// sends).
type (
	status   string
	errReply string // without the leading '-'
	multi    []any
)

// appendReply appends r's RESP2 encoding to b.
func appendReply(b []byte, r any) []byte {
	switch r := r.(type) {
	case nil:
		return append(b, "$-1\r\n"...)
	case status:
		return append(append(append(b, '+'), oneLine(string(r))...), "\r\n"...)
	case errReply:
		return append(append(append(b, '-'), oneLine(string(r))...), "\r\n"...)
	case int64:
		return append(strconv.AppendInt(append(b, ':'), r, 10), "\r\n"...)
	case string:
		b = strconv.AppendInt(append(b, '$'), int64(len(r)), 10)
		return append(append(append(b, "\r\n"...), r...), "\r\n"...)
	case []any:
		b = append(strconv.AppendInt(append(b, '*'), int64(len(r)), 10), "\r\n"...)
		for _, e := range r {
			b = appendReply(b, e)
		}
		return b
	case multi:
		for _, e := range r {
			b = appendReply(b, e)
		}
		return b
	}
	panic("memredis: unknown reply type")
}

// oneLine keeps a status or error on its line.
func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

// A protocolError is a malformed request; the connection is then closed.
type protocolError string

func (e protocolError) Error() string { return string(e) }

// readCommand reads one command: an array of bulk strings, or an inline
// command (words on a line), as redis-cli and telnet send.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return strings.Fields(line), nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n > 1<<20 {
		return nil, protocolError("invalid multibulk length")
	}
	args := make([]string, 0, max(n, 0))
	for range n {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
		if !strings.HasPrefix(line, "$") || err != nil || size < 0 || size > 512<<20 {
			return nil, protocolError("invalid bulk length")
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

// readLine reads a line without its \r\n.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), nil
}
