package driver_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/redlock-go/redlock/driver"
)

// A Reply's accessors return its value when it has the type asked for,
// its error when it has one, and a *TypeError otherwise.
func TestReplyAccessors(t *testing.T) {
	failed := errors.New("failed")
	for _, tc := range []struct {
		r                driver.Reply
		i                int64
		s                string
		a                []any
		iErr, sErr, aErr bool
	}{
		{r: driver.Reply{Val: int64(7)}, i: 7, sErr: true, aErr: true},
		{r: driver.Reply{Val: "x"}, s: "x", iErr: true, aErr: true},
		{r: driver.Reply{Val: []any{int64(1), "a"}}, a: []any{int64(1), "a"}, iErr: true, sErr: true},
		{r: driver.Reply{Val: true}, iErr: true, sErr: true, aErr: true},
		{r: driver.Reply{Err: driver.ErrNil}, iErr: true, sErr: true, aErr: true},
		{r: driver.Reply{Err: failed}, iErr: true, sErr: true, aErr: true},
	} {
		i, err := tc.r.Int64()
		if i != tc.i || (err != nil) != tc.iErr {
			t.Errorf("%#v.Int64() = %d, %v", tc.r, i, err)
		}
		s, err := tc.r.Text()
		if s != tc.s || (err != nil) != tc.sErr {
			t.Errorf("%#v.Text() = %q, %v", tc.r, s, err)
		}
		a, err := tc.r.Slice()
		if !reflect.DeepEqual(a, tc.a) || (err != nil) != tc.aErr {
			t.Errorf("%#v.Slice() = %v, %v", tc.r, a, err)
		}
		if tc.r.Err != nil && !errors.Is(err, tc.r.Err) {
			t.Errorf("%#v.Slice() error %v, want the reply's own", tc.r, err)
		}
		var te *driver.TypeError
		if tc.r.Err == nil && err != nil && !errors.As(err, &te) {
			t.Errorf("%#v.Slice() error %v, want a *TypeError", tc.r, err)
		}
	}
	if got, want := (&driver.TypeError{Want: "an integer", Val: true}).Error(), "redlock/driver: reply is a bool, want an integer"; got != want {
		t.Errorf("TypeError = %q, want %q", got, want)
	}
}
