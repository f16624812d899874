package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/redlock-go/redlock/driver"
	redlockrueidis "github.com/redlock-go/redlock/drivers/rueidis"
	"github.com/redlock-go/redlock/drivertest"
)

func TestAcceptance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, addr string) driver.Conn {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.Close)
		c, err := redlockrueidis.New(rc)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
