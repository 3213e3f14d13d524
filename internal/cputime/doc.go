// Package cputime reads the process's CPU time: on a CPU Vulkan device (lavapipe) the device's
// work is this process's CPU time, which other processes' load does not inflate as it does
// wall-clock timestamps (vkc bench prints it; the kernel benchmarks compare with it).
package cputime
