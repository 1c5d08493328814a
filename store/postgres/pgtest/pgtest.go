// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema of the server named by MNEME_TEST_POSTGRES, dropped when the test
// ends. scripts/test (and so CI) starts PostgreSQL and exports the variable;
// without it a test skips locally and fails under CI=true, because the
// PostgreSQL tests must run in CI. For tests only.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the base DSN.
const EnvVar = "MNEME_TEST_POSTGRES"

// Base returns MNEME_TEST_POSTGRES, skipping the test when it is unset (or
// failing it under CI=true).
func Base(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvVar)
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + EnvVar + " is unset: PostgreSQL tests must run in CI (scripts/test starts PostgreSQL and exports it)")
		}
		t.Skip(EnvVar + " is unset (scripts/test starts PostgreSQL and sets it)")
	}
	return base
}

// DSN returns a DSN whose search_path is a fresh schema (named prefix_<random>),
// dropped with everything in it when the test ends.
func DSN(t testing.TB, prefix string) string {
	t.Helper()
	base := Base(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := prefix + "_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvVar, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
