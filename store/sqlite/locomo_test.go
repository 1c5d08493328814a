package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

func TestLoCoMoSearch(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "locomo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.LoCoMoSearch(t, s)
}
