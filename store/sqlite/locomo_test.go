package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mnemehq/mneme/store/inmem"
	"github.com/mnemehq/mneme/store/sqlite"
	"github.com/mnemehq/mneme/store/storetest"
)

// SQLite answers LoCoMo's questions as store/inmem does (whose figures
// storetest.LoCoMoSearch checks).
func TestLoCoMoSame(t *testing.T) {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "locomo.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.LoCoMoSame(t, s, inmem.New())
}
