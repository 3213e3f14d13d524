//go:build unix

package vkc

import (
	"fmt"
	"os"
	"syscall"
)

// inode names a file's identity (device and inode), so a file replaced by another of the same
// size and time is told apart.
func inode(st os.FileInfo) string {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", s.Dev, s.Ino)
	}
	return ""
}
