package driver_test

import (
	"errors"
	"fmt"

	"github.com/redlock-go/redlock/driver"
)

// Int64 reads an integer reply, such as a script's count of keys set. A
// nil reply is an error matching ErrNil, and a value of another type a
// *TypeError.
func ExampleReply_Int64() {
	n, err := driver.Reply{Val: int64(3)}.Int64()
	fmt.Println(n, err)

	_, err = driver.Reply{Err: driver.ErrNil}.Int64()
	fmt.Println(errors.Is(err, driver.ErrNil))

	_, err = driver.Reply{Val: "OK"}.Int64()
	var te *driver.TypeError
	fmt.Println(errors.As(err, &te), err)
	// Output:
	// 3 <nil>
	// true
	// true redlock/driver: reply is a string, want an integer
}

// Text reads a simple or bulk string reply, such as a GET's. The server's
// error reply comes back as Err.
func ExampleReply_Text() {
	s, err := driver.Reply{Val: "token-1"}.Text()
	fmt.Println(s, err)

	_, err = driver.Reply{Err: errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")}.Text()
	fmt.Println(err)
	// Output:
	// token-1 <nil>
	// WRONGTYPE Operation against a key holding the wrong kind of value
}

// Slice reads an array reply; its elements are typed as Val is, and arrays
// nest.
func ExampleReply_Slice() {
	r := driver.Reply{Val: []any{int64(1), "holder", []any{"a", "b"}, nil}}
	vs, err := r.Slice()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range vs {
		fmt.Printf("%T %v\n", v, v)
	}
	// Output:
	// int64 1
	// string holder
	// []interface {} [a b]
	// <nil> <nil>
}
