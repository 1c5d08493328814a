//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// writable reports whether this process may open the file at path for
// writing, as SQLite tries to (it falls back to read-only otherwise). It
// asks access(2) rather than opening the file: closing a descriptor of a
// database file would drop the POSIX locks SQLite holds on it.
func writable(path string) bool {
	return unix.Access(path, unix.W_OK) == nil
}
