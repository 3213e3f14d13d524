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

// TestDeviceLimitsAtCompileTime: a plan that exceeds the target's maxMemoryAllocationSize,
// maxStorageBufferRange or device-local heap where lowering cannot cut it (a state tensor, an
// input, the whole plan) fails to compile, naming what is too large and both sizes, instead of
// failing at load; a weight larger than either is cut into pieces and compiles. The limits are
// made small, so nothing large is allocated.
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
		{"allocation", func(c *kernels.Caps) { c.MaxAllocation = 32 << 10 },
			"state s: 64.0 KiB (65536 bytes), more than one device allocation may hold (maxMemoryAllocationSize 32.0 KiB)"},
		{"binding", func(c *kernels.Caps) { c.MaxBindingRange = 32 << 10 },
			"binding 0, input0 bytes 0..65536 is 64.0 KiB (65536 bytes), more than the device's maxStorageBufferRange of 32.0 KiB"},
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
	// w alone larger than an allocation and a binding: cut into row pieces.
	caps := kernels.Lavapipe
	caps.MaxAllocation, caps.MaxBindingRange = 128<<10, 128<<10
	p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: caps, CompilerVersion: "t"})
	if err != nil {
		t.Fatalf("w in pieces: %v", err)
	}
	if len(p.Weights.Split) == 0 {
		t.Errorf("a weight region of %d bytes in one buffer of at most %d", p.Weights.Size, caps.MaxAllocation)
	}
}

// TestDeviceLimitsSayWhatFits: a binding past maxStorageBufferRange in a function with a run-time
// length says how many rows would fit (lavapipe's 128 MiB holds 261 rows of a 128256-token
// vocabulary's f32 logits, where an 8B import asked for 512), and how to compile the others
// without it. Here x of 64 rows is 64 KiB under a 32 KiB range: 32 rows fit.
func TestDeviceLimitsSayWhatFits(t *testing.T) {
	const src = `
model: rows
dims: {d: 256}
weights: {init: random, seed: 1}
params:
  w: [d, d]
functions:
  f:
    dims: {seq: 1..64}
    inputs:
      x: f32[seq, d]
    outputs: [y]
    body:
      - y = linear(x, w)
  g:
    inputs:
      x: f32[1, d]
    outputs: [y]
    body:
      - y = linear(x, w)
`
	m, err := ir.ParseModelBytes("rows.yaml", []byte(src), "")
	if err != nil {
		t.Fatal(err)
	}
	caps := kernels.Lavapipe
	caps.MaxBindingRange = 32 << 10
	_, _, err = lower.Lower(m, m.Functions, lower.Options{Caps: caps, CompilerVersion: "t"})
	for _, want := range []string{"function f takes up to 64 rows (seq), and about 32 would fit", "or compile without f: vkc compile -f g"} {
		if !errors.Is(err, lower.ErrDeviceLimit) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v\nwant ErrDeviceLimit with %q", err, want)
		}
	}
}
