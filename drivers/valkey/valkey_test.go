package valkey_test

import (
	"testing"

	valkey "github.com/valkey-io/valkey-go"

	"github.com/redlock-go/redlock/driver"
	redlockvalkey "github.com/redlock-go/redlock/drivers/valkey"
	"github.com/redlock-go/redlock/drivertest"
)

func TestAcceptance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
		rc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		c, err := redlockvalkey.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
