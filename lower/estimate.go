package lower

import (
	"time"

	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// DeviceModel is the static roofline of a device: what a kernel costs when it is limited by
// memory bandwidth or arithmetic, plus a fixed cost per dispatch. It is a cost for extraction and
// for ranking templates before anything is measured, not a prediction to trust.
type DeviceModel struct {
	Name      string
	Bandwidth float64 // bytes per second that a well-written kernel reaches
	Flops     float64 // f32 FLOP per second that a well-written kernel reaches
	// MatrixFlops is the rate of products on cooperative matrices (f16 or bf16 into f32) that a
	// well-written kernel reaches, for launches marked Matrix; 0 when the device has none.
	MatrixFlops float64
	Dispatch    time.Duration // fixed cost of one dispatch
	Barrier     time.Duration // cost of one compute-to-compute barrier
	// Lanes is how many invocations in flight it takes to reach Bandwidth and Flops; a launch
	// with fewer runs proportionally slower (a one-row matmul on a 64×64 tiled kernel occupies
	// two workgroups of a GPU). 0: no occupancy term.
	Lanes int
}

// Lavapipe is Mesa's CPU implementation on a small machine (two cores).
var Lavapipe = DeviceModel{Name: "lavapipe", Bandwidth: 8e9, Flops: 2e10, Dispatch: 4 * time.Microsecond, Barrier: 2 * time.Microsecond, Lanes: 64}

// DiscreteGPU is a large discrete GPU (the figures of GPU.md's H200: ~4 TB/s, 0.17 µs per
// dispatch, 2 µs per barrier; f32 arithmetic 5e13/s; products on cooperative matrices counted at
// 2e14/s, a fifth of the H200's f16 tensor peak, which is what a Vulkan kernel without the
// Hopper-only instructions can hope for). Only devices with cooperative matrices get such launches.
var DiscreteGPU = DeviceModel{Name: "discrete GPU", Bandwidth: 3.5e12, Flops: 5e13, MatrixFlops: 2e14, Dispatch: 170 * time.Nanosecond, Barrier: 2 * time.Microsecond, Lanes: 32768}

// mesaVendor is the vendor ID Mesa's software drivers report (VK_VENDOR_ID_MESA).
const mesaVendor = 0x10005

// ModelFor picks a device model from a fingerprint: lavapipe for Mesa's software vendor ID (and
// for an unknown, zero fingerprint), a discrete GPU otherwise.
func ModelFor(fp plan.Fingerprint) DeviceModel {
	if fp.VendorID == mesaVendor || fp.VendorID == 0 {
		return Lavapipe
	}
	return DiscreteGPU
}

// Estimate is the roofline time of a launch: max(bytes/bandwidth, flops/peak, with the matrix peak
// times the launch's MatrixRate for a launch on cooperative matrices), divided by the launch's
// occupancy (its Occupancy, else its largest step's invocations, over dev.Lanes, at most 1),
// plus the fixed cost of each dispatch (and of a barrier between consecutive steps). Extraction
// uses it as a static cost.
//
//	t := lower.Estimate(launch, lower.ModelFor(fingerprint))
func Estimate(l *kernels.Launch, dev DeviceModel) time.Duration {
	if l == nil {
		return 0
	}
	if dev.Bandwidth <= 0 || dev.Flops <= 0 {
		dev = Lavapipe
	}
	mem := l.Bytes / dev.Bandwidth
	alu := l.Flops / dev.Flops
	if l.Matrix && dev.MatrixFlops > 0 {
		rate := dev.MatrixFlops
		if l.MatrixRate > 0 {
			rate *= l.MatrixRate
		}
		alu = l.Flops / rate
	}
	occ := 1.0
	if dev.Lanes > 0 {
		occ = min(1, max(invocations(l), 1)/float64(dev.Lanes))
	}
	t := time.Duration(max(mem, alu) / occ * 1e9)
	n := len(l.Steps)
	t += time.Duration(n) * dev.Dispatch
	if n > 1 {
		t += time.Duration(n-1) * dev.Barrier
	}
	return t
}
