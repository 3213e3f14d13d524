//go:build !unix

package main

import "time"

// processCPU is unknown here (0): vkc bench then prints no CPU time.
func processCPU() time.Duration { return 0 }
