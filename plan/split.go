package plan

import (
	"fmt"
	"sort"
)

// Split cuts a region (the weights, the state or the arena) into device buffers: the byte
// offsets, strictly increasing and inside (0, size), at which the buffers after the first begin.
// The first buffer begins at 0 and the last ends at the region's size; a nil Split is one buffer
// holding the whole region, as every plan that fits one allocation has.
//
// Offsets stay the region's: a binding, a tensor or an arena-placed value names its bytes by
// region offset, and the runtime binds buffer Of(offset) at offset − Start(i). The compiler
// splits a region where it exceeds the device's maxMemoryAllocationSize, and places every tensor
// so that none crosses a split; Validate checks that no binding, weight, state tensor or
// arena-placed value does.
type Split []uint64

// Buffers is the number of device buffers the split makes.
func (s Split) Buffers() int { return len(s) + 1 }

// Of returns the index of the buffer that holds byte off.
func (s Split) Of(off uint64) int {
	return sort.Search(len(s), func(i int) bool { return s[i] > off })
}

// Bounds returns where buffer i of a region of size bytes begins and ends.
func (s Split) Bounds(i int, size uint64) (start, end uint64) {
	if i > 0 {
		start = s[i-1]
	}
	end = size
	if i < len(s) {
		end = s[i]
	}
	return start, end
}

// Holds reports whether bytes [off, off+n) lie in one buffer of the split (n > 0).
func (s Split) Holds(off, n uint64) bool {
	if n == 0 {
		return true
	}
	return s.Of(off) == s.Of(off+n-1)
}

// check reports what is wrong with s as the split of a region of size bytes, or "".
func (s Split) check(size uint64) string {
	prev := uint64(0)
	for i, x := range s {
		switch {
		case x <= prev:
			return fmt.Sprintf("buffer %d begins at byte %d, not after the one before it (%d)", i+1, x, prev)
		case x >= size:
			return fmt.Sprintf("buffer %d begins at byte %d, not inside the %d-byte region", i+1, x, size)
		}
		prev = x
	}
	return ""
}

// Regions of the device memory a plan needs at once, as the runtime allocates it.
type DeviceMemory struct {
	Weights, State, Arena uint64
	// Staging is the inputs' and outputs' slots of every function and variant (each function
	// has its own), which the runtime allocates besides the regions.
	Staging uint64
	// Buffers is the number of device allocations the regions take.
	Buffers int
	// Largest is the largest single allocation among the regions' buffers and the slots.
	Largest uint64
}

// Total is the bytes of device memory the plan needs loaded.
func (m DeviceMemory) Total() uint64 { return m.Weights + m.State + m.Arena + m.Staging }

// DeviceMemory sums what loading the plan allocates in device memory: the weight, state and
// arena regions and every function's input and output slots. The runtime's own staging (for
// uploads on devices without host-visible device memory) and small per-function blocks are not
// counted.
func (p *Plan) DeviceMemory() DeviceMemory {
	m := DeviceMemory{Weights: p.Weights.Size, State: p.StateSize, Arena: p.Arena.Size}
	for _, r := range []struct {
		size  uint64
		split Split
	}{{p.Weights.Size, p.Weights.Split}, {p.StateSize, p.StateSplit}, {p.Arena.Size, p.Arena.Split}} {
		m.Buffers += r.split.Buffers()
		for i := range r.split.Buffers() {
			s, e := r.split.Bounds(i, r.size)
			m.Largest = max(m.Largest, e-s)
		}
	}
	slots := func(f *Function) {
		for _, vs := range [][]Value{f.Inputs, f.Outputs} {
			for i := range vs {
				if vs[i].Place != Staging {
					continue
				}
				if n, err := vs[i].Bytes(); err == nil {
					m.Staging += n
					m.Largest = max(m.Largest, n)
				}
			}
		}
	}
	for i := range p.Functions {
		slots(&p.Functions[i])
		for j := range p.Functions[i].Variants {
			slots(&p.Functions[i].Variants[j])
		}
	}
	return m
}

// splitOf returns the split of region r (a weight, state or arena region; nil otherwise).
func (p *Plan) splitOf(r Region) Split {
	switch r.Kind {
	case RegionWeights:
		return p.Weights.Split
	case RegionState:
		return p.StateSplit
	case RegionArena:
		return p.Arena.Split
	}
	return nil
}
