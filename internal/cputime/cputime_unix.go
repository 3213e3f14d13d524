//go:build unix

package cputime

import (
	"syscall"
	"time"
)

// Process is the CPU time (user and system) this process has used, all its threads together (a
// CPU Vulkan implementation's included); 0 where unknown.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
