package mneme_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/message"

	// The library links no database driver of its own: this import
	// registers the sqlite: scheme (and bare *.db paths) for Open.
	_ "github.com/mnemehq/mneme/store/sqlite"
)

// ExampleOpen opens a thread log in an SQLite file, appends to it, closes
// it, and reads the thread back from the file in a second Engine.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mneme-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	dsn := "sqlite:" + filepath.Join(dir, "mneme.db")

	m, err := mneme.Open(ctx, mneme.Config{DSN: dsn})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := m.Thread("default", "run-42").Append(ctx,
		message.NewText(message.User, "Fix INV-4401 in src/shop/checkout.go")); err != nil {
		log.Fatal(err)
	}
	m.Close()

	m, err = mneme.Open(ctx, mneme.Config{DSN: dsn})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	w, err := m.Thread("default", "run-42").Window(ctx, mneme.WindowOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(w.Messages), "message:", w.Messages[0].PlainText())
	// Output: 1 message: Fix INV-4401 in src/shop/checkout.go
}
