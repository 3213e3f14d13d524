//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used, all threads together.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
