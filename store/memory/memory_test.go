package memory_test

import (
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/memory"
	"github.com/mnemehq/mneme/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
}
