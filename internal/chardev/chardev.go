// Package chardev gives tests a character device to write to, for the checks that an output is
// written through a device rather than replaced.
package chardev

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Null returns a character device to write to: as root a private copy of /dev/null made with
// mknod in dir (so that a bug replacing it cannot replace the system's), else /dev/null itself
// (which a process that is not root cannot replace). Without either the test is skipped, naming
// both failures.
func Null(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "null")
	mknod := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3) // major 1, minor 3: /dev/null
	if mknod == nil {
		return p
	}
	st, err := os.Stat("/dev/null")
	if err == nil && st.Mode()&os.ModeCharDevice != 0 {
		return "/dev/null"
	}
	if err == nil {
		err = &os.PathError{Op: "stat", Path: "/dev/null", Err: syscall.ENODEV}
	}
	t.Skipf("needs a character device to write to: mknod %s: %v (it needs root), and /dev/null is none: %v", p, mknod, err)
	return ""
}
