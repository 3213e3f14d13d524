package lower

import (
	"errors"
	"fmt"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// ErrDeviceLimit is wrapped by the error for a plan the target device cannot hold: a region
// larger than one allocation may be, a binding larger than a storage buffer range, or more than
// the device-local memory in all. The plan would fail at load; the compile fails instead.
var ErrDeviceLimit = errors.New("exceeds the device's memory limits")

// checkDeviceLimits compares the plan's memory with the Caps' limits (a zero limit is unknown and
// not checked): the weight (weights bytes), state and arena regions and every staging slot are
// one allocation each (maxMemoryAllocationSize), every binding one storage buffer range
// (maxStorageBufferRange), and all of them are device memory at once (the largest device-local
// heap). It runs before the weight region is assembled in host memory.
func checkDeviceLimits(p *plan.Plan, weights, state uint64, c kernels.Caps) error {
	limit := func(what string, n, max uint64, name string) error {
		if max > 0 && n > max {
			return fmt.Errorf("lower: %s is %s (%d bytes), more than the device's %s of %s (%d bytes): %w",
				what, hostmem.Size(n), n, name, hostmem.Size(max), max, ErrDeviceLimit)
		}
		return nil
	}
	total := weights + state + p.Arena.Size
	for _, r := range []struct {
		what string
		n    uint64
	}{{"the weight region", weights}, {"the state region", state}, {"the arena", p.Arena.Size}} {
		if err := limit(r.what, r.n, c.MaxAllocation, "maxMemoryAllocationSize"); err != nil {
			return err
		}
	}
	for _, f := range p.Functions {
		for _, io := range []struct {
			kind string
			vs   []plan.Value
		}{{"input", f.Inputs}, {"output", f.Outputs}} {
			kind := io.kind
			for _, v := range io.vs {
				n, err := v.Bytes()
				if err != nil || v.Place != plan.Staging {
					continue
				}
				total += n
				if err := limit(fmt.Sprintf("function %s: %s %s", f.Name, kind, v.Name), n, c.MaxAllocation, "maxMemoryAllocationSize"); err != nil {
					return err
				}
			}
		}
		for i, d := range f.Dispatches {
			for _, b := range d.Bindings {
				what := fmt.Sprintf("function %s: dispatch %d (%s): binding %d, %s bytes %d..%d", f.Name, i, d.Label, b.Binding,
					b.Buffer.Region, b.Buffer.Offset, b.Buffer.Offset+b.Buffer.Range)
				if err := limit(what, b.Buffer.Range, c.MaxBindingRange, "maxStorageBufferRange"); err != nil {
					return err
				}
			}
		}
	}
	return limit("the plan's device memory (weights, state, arena and staging slots)", total, c.DeviceMemory, "largest device-local heap")
}
