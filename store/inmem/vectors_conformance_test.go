package inmem_test

import (
	"testing"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/storetest"
)

// TestVectorsConformance runs the store.Vectors suite shared by every backend.
func TestVectorsConformance(t *testing.T) {
	storetest.RunVectors(t, func(t *testing.T) store.Store { return inmem.New() })
}
