//go:build unix

package tokenizer

import "syscall"

// cpuSeconds is the CPU time the process has used (all threads: with -cpu 1 that is what one
// core spends, GC included).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
