package inmem_test

import (
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return inmem.New() })
}

func TestLoCoMoSearch(t *testing.T) {
	storetest.LoCoMoSearch(t, inmem.New())
}
