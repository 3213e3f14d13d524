//go:build !unix

package safefile

import "os"

// alive reports whether process pid might exist. Without a signal 0 to ask, a process that can
// be opened counts as alive (Windows: FindProcess opens it and fails for no such process);
// elsewhere every process does, so no other process's temporary file is ever removed.
func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
