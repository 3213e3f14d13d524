package lower_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
)

const limitsModel = `
model: limits
dims: {n: 64, d: 256}
weights: {init: random, seed: 1}
params:
  w: [d, d]
state:
  s: [n, d]
functions:
  f:
    inputs:
      x: f32[n, d]
    outputs: [y]
    body:
      - y = linear(x, w)
`

// TestDeviceLimitsAtCompileTime: a plan whose weight region, bindings or total memory exceed the
// target's maxMemoryAllocationSize, maxStorageBufferRange or device-local heap fails to compile,
// naming what is too large and both sizes, instead of failing at load. The limits are made
// small, so nothing large is allocated.
func TestDeviceLimitsAtCompileTime(t *testing.T) {
	m, err := ir.ParseModelBytes("limits.yaml", []byte(limitsModel), "")
	if err != nil {
		t.Fatal(err)
	}
	// w is 256·256·4 = 256 KiB; x and y are 64·256·4 = 64 KiB; the state 64 KiB.
	for _, tc := range []struct {
		name   string
		change func(c *kernels.Caps)
		want   string
	}{
		{"allocation", func(c *kernels.Caps) { c.MaxAllocation = 128 << 10 },
			"the weight region is 256.0 KiB (262144 bytes), more than the device's maxMemoryAllocationSize of 128.0 KiB (131072 bytes)"},
		{"binding", func(c *kernels.Caps) { c.MaxBindingRange = 128 << 10 },
			"binding 1, weights bytes 0..262144 is 256.0 KiB (262144 bytes), more than the device's maxStorageBufferRange of 128.0 KiB"},
		{"heap", func(c *kernels.Caps) { c.DeviceMemory = 300 << 10 },
			"the plan's device memory (weights, state, arena and staging slots) is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := kernels.Lavapipe
			tc.change(&caps)
			p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: caps, CompilerVersion: "t"})
			if !errors.Is(err, lower.ErrDeviceLimit) || p != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant ErrDeviceLimit with %q", err, tc.want)
			}
		})
	}
	if _, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"}); err != nil {
		t.Errorf("within lavapipe's limits: %v", err)
	}
}
