//go:build !unix

package tokenizer

// cpuSeconds is unknown here: the benchmarks report wall-clock MB/s only.
func cpuSeconds() float64 { return -1 }
