package memory_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/store/memory"
	"github.com/sluice-go/sluice/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) sluice.Store {
		return memory.New(memory.WithClock(now))
	})
}
