package lower

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// ErrDeviceLimit is wrapped by the error for a plan the target device cannot hold: a tensor
// larger than one allocation or one storage buffer may be that lowering cannot split, or more
// than the device-local memory in all. The plan would fail at load; the compile fails instead.
var ErrDeviceLimit = errors.New("exceeds the device's memory limits")

// checkDeviceLimits compares the plan's memory with the Caps' limits (a zero limit is unknown and
// not checked). The weight, state and arena regions are cut into buffers of at most
// maxMemoryAllocationSize by construction (fit, arenaSplit, memplan.AssignWithin), and rows of
// weights larger than a storage buffer into pieces (split.go); this checks the result: every
// region buffer and staging slot is one allocation (maxMemoryAllocationSize), every binding one
// storage buffer range (maxStorageBufferRange), and all of them are device memory at once (the
// largest device-local heap; the loader checks the heap's budget again before it allocates).
// It runs before the weight region is assembled in host memory; weights is the weight region's
// size so far.
func checkDeviceLimits(p *plan.Plan, weights, state uint64, c kernels.Caps) error {
	limit := func(what string, n, max uint64, name string) error {
		if max > 0 && n > max {
			return fmt.Errorf("lower: %s is %s (%d bytes), more than the device's %s of %s (%d bytes): %w",
				what, hostmem.Size(n), n, name, hostmem.Size(max), max, ErrDeviceLimit)
		}
		return nil
	}
	for _, r := range []struct {
		what  string
		size  uint64
		split plan.Split
	}{{"the weight region", weights, p.Weights.Split}, {"the state region", state, p.StateSplit}, {"the arena", p.Arena.Size, p.Arena.Split}} {
		for i := range r.split.Buffers() {
			a, b := r.split.Bounds(i, r.size)
			what := r.what
			if len(r.split) > 0 {
				what = fmt.Sprintf("buffer %d of %d of %s", i+1, r.split.Buffers(), r.what)
			}
			if err := limit(what, b-a, c.MaxAllocation, "maxMemoryAllocationSize"); err != nil {
				return err
			}
		}
	}
	total := weights + state + p.Arena.Size
	// Weight tensors by offset, to name the one a binding reads.
	type named struct {
		off  uint64
		name string
	}
	var ws []named
	for _, t := range p.Weights.Tensors {
		ws = append(ws, named{t.Offset, t.Name})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].off < ws[j].off })
	all := func(f *plan.Function, each func(f *plan.Function)) {
		each(f)
		for i := range f.Variants {
			each(&f.Variants[i])
		}
	}
	var err error
	for i := range p.Functions {
		base := p.Functions[i].Name
		all(&p.Functions[i], func(f *plan.Function) {
			for _, io := range []struct {
				kind string
				vs   []plan.Value
			}{{"input", f.Inputs}, {"output", f.Outputs}} {
				for _, v := range io.vs {
					n, e := v.Bytes()
					if e != nil || v.Place != plan.Staging {
						continue
					}
					total += n
					if e := limit(fmt.Sprintf("function %s: %s %s", f.Name, io.kind, v.Name), n, c.MaxAllocation, "maxMemoryAllocationSize"); e != nil && err == nil {
						err = e
					}
				}
			}
			for i, d := range f.Dispatches {
				for _, b := range d.Bindings {
					r := b.Buffer
					what := fmt.Sprintf("function %s: dispatch %d (%s): binding %d, %s bytes %d..%d", f.Name, i, d.Label, b.Binding,
						r.Region, r.Offset, r.Offset+r.Range)
					if r.Region.Kind == plan.RegionWeights {
						k := sort.Search(len(ws), func(k int) bool { return ws[k].off > r.Offset }) - 1
						if k >= 0 {
							what += " (weight " + ws[k].name + ")"
						}
					}
					if e := limit(what, r.Range, c.MaxBindingRange, "maxStorageBufferRange"); e != nil && err == nil {
						err = e
						if l := f.Length; l != nil && l.Max > 1 && r.Range > 0 {
							// Most of a function's buffers grow with its rows: fewer fit.
							if fit := uint64(l.Max) * c.MaxBindingRange / r.Range; fit >= uint64(l.Min) && fit >= 1 {
								err = fmt.Errorf("%w; function %s takes up to %d rows (%s), and about %d would fit: give it fewer (vkc import --prefill %d for an imported model, else the dimension in model.yaml)%s",
									e, f.Name, l.Max, l.Name, fit, fit, leaveOut(p, base))
							}
						}
					}
				}
			}
		})
	}
	if err != nil {
		return err
	}
	return limit("the plan's device memory (weights, state, arena and staging slots)", total, c.DeviceMemory, "largest device-local heap")
}

// leaveOut says how to compile p's functions but fn, when it has others: an imported model's
// score function (every row's logits) may exceed a binding limit that prefill and decode keep.
// The names are the model's (-f's): a compile's fixed-length copies (prefill@8) go with theirs.
func leaveOut(p *plan.Plan, fn string) string {
	fn, _, _ = strings.Cut(fn, "@")
	var others []string
	for _, f := range p.Functions {
		if name, _, _ := strings.Cut(f.Name, "@"); name != fn && !slices.Contains(others, name) {
			others = append(others, name)
		}
	}
	if len(others) == 0 {
		return ""
	}
	return fmt.Sprintf(", or compile without %s: vkc compile -f %s", fn, strings.Join(others, ","))
}
