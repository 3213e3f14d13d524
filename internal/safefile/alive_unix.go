//go:build unix

package safefile

import (
	"errors"
	"os"
	"syscall"
)

// alive reports whether process pid exists on this machine (or might: a permission error says
// it exists).
func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
