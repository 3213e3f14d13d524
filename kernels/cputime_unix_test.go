//go:build unix

package kernels_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (a CPU Vulkan implementation's threads
// included), 0 where unknown.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
