package runtime

import (
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/plan"
)

// HeapRoom is what a device-local heap has for a plan: its size, and where VK_EXT_memory_budget
// exists its budget and current usage (of every process on some drivers, of this one on others).
type HeapRoom struct {
	Index         int
	Size          uint64
	Budget, Usage uint64 // 0 when unknown
	// Own is what this Device allocated from the heap so far (0 for a device not opened).
	Own uint64
}

// Free is the bytes a new allocation may take: budget − usage where the budget is known, else
// the heap's size less what this Device holds.
func (h HeapRoom) Free() uint64 {
	if h.Budget > 0 {
		if h.Usage >= h.Budget {
			return 0
		}
		return h.Budget - h.Usage
	}
	if h.Own >= h.Size {
		return 0
	}
	return h.Size - h.Own
}

func (h HeapRoom) String() string {
	if h.Budget > 0 {
		return fmt.Sprintf("heap %d has %s free (budget %s, %s in use, %s in all)", h.Index, hostmem.Size(h.Free()),
			hostmem.Size(h.Budget), hostmem.Size(h.Usage), hostmem.Size(h.Size))
	}
	return fmt.Sprintf("heap %d has %s free (%s in all, no VK_EXT_memory_budget)", h.Index, hostmem.Size(h.Free()), hostmem.Size(h.Size))
}

// Room is what the heap the device allocates buffers from has now (refreshed budget).
func (d *Device) Room() HeapRoom {
	p := d.pools[poolDevice]
	heaps := d.Budget()
	r := HeapRoom{Index: p.heap}
	if p.heap < len(heaps) {
		h := heaps[p.heap]
		r.Size, r.Budget, r.Usage = h.Size, h.Budget, h.Usage
	}
	st := d.MemoryUsage()
	r.Own = st.DeviceAllocated
	if d.pools[poolStaging].heap == p.heap {
		r.Own += st.StagingAllocated
	}
	return r
}

// RoomOf is what the largest device-local heap of a listed device (Devices) has, as of the
// listing.
func RoomOf(info *DeviceInfo) HeapRoom {
	r := HeapRoom{Index: -1}
	for i, h := range info.Memory.Heaps {
		if h.DeviceLocal && (r.Index < 0 || h.Size > r.Size) {
			r = HeapRoom{Index: i, Size: h.Size, Budget: h.Budget, Usage: h.Usage}
		}
	}
	if r.Index < 0 && len(info.Memory.Heaps) > 0 {
		h := info.Memory.Heaps[0]
		r = HeapRoom{Index: 0, Size: h.Size, Budget: h.Budget, Usage: h.Usage}
	}
	return r
}

// CheckFits compares the device memory p needs loaded (plan.DeviceMemory: weights, state,
// arena, input and output slots) with what room r has free. It returns nil, or an error wrapping
// ErrOutOfDeviceMemory that gives the numbers and what would fit: a shorter context (the state's
// KV caches scale with it), a quantized KV cache. Device.Load calls it before it allocates
// anything; `vkc inspect --check-device` prints it without loading.
func CheckFits(p *plan.Plan, r HeapRoom) error {
	m := p.DeviceMemory()
	need, free := m.Total(), r.Free()
	if need <= free {
		return nil
	}
	var hints []string
	other := m.Weights + m.Arena + m.Staging
	if ctx, ok := stateContext(p); ok && m.State > 0 {
		perRow := m.State / uint64(ctx)
		switch {
		case other >= free:
			hints = append(hints, fmt.Sprintf("the weights, arena and slots alone (%s) take more than that, at any context", hostmem.Size(other)))
		case perRow > 0:
			fit := (free - other) / perRow
			if fit >= 256 {
				fit = fit / 256 * 256
			}
			if fit >= 1 {
				hints = append(hints, fmt.Sprintf("a context of %d (--ctx %d; the state is %s for %d)", fit, fit, hostmem.Size(m.State), ctx))
			} else {
				hints = append(hints, fmt.Sprintf("no context fits beside the weights, arena and slots (%s)", hostmem.Size(other)))
			}
		}
	}
	if kv := quantizedState(p); kv != "" && other < free {
		hints = append(hints, kv)
	}
	msg := fmt.Sprintf("the plan needs %s of device memory (weights %s, state %s, arena %s, input and output slots %s), more than %s",
		hostmem.Size(need), hostmem.Size(m.Weights), hostmem.Size(m.State), hostmem.Size(m.Arena), hostmem.Size(m.Staging), r)
	if len(hints) > 0 {
		msg += "; would fit: " + strings.Join(hints, ", or ")
	}
	return fmt.Errorf("%s: %w", msg, ErrOutOfDeviceMemory)
}

// stateContext is the context of p's state: the leading axis every state tensor shares (a KV
// cache is [ctx, kv_heads, head_dim]), if they share one.
func stateContext(p *plan.Plan) (int64, bool) {
	var ctx int64
	for _, s := range p.State {
		if len(s.Shape) < 2 || s.Shape[0] <= 0 || (ctx != 0 && s.Shape[0] != ctx) {
			return 0, false
		}
		ctx = s.Shape[0]
	}
	return ctx, ctx > 0
}

// quantizedState suggests a quantized KV cache when the state is f32 or f16 (llama.cpp's
// q8_0 takes 34 bytes per 32 values, q4_0 18), with the state's size in each.
func quantizedState(p *plan.Plan) string {
	var elems, bytes uint64
	for _, s := range p.State {
		if s.DType != plan.F32 && s.DType != plan.F16 {
			return ""
		}
		n, err := plan.Elements(s.Shape)
		if err != nil {
			return ""
		}
		elems += uint64(n)
		b, _ := s.DType.Bytes(s.Shape)
		bytes += uint64(b)
	}
	if elems == 0 {
		return ""
	}
	return fmt.Sprintf("a quantized KV cache (--kv q8_0: %s of KV caches instead of %s; --kv q4_0: %s)",
		hostmem.Size(elems*34/32), hostmem.Size(bytes), hostmem.Size(elems*18/32))
}
