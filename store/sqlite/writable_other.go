//go:build !unix

package sqlite

import "os"

// writable reports whether the file at path is writable by its mode bits
// (outside Unix SQLite's locks do not suffer from a descriptor's close
// the same way, but a mode check suffices here).
func writable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Perm()&0o200 != 0
}
