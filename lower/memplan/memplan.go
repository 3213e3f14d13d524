// Package memplan places buffers with known lifetimes in one arena so that buffers alive at the
// same time never share bytes and buffers whose lifetimes are disjoint reuse memory.
package memplan

import "sort"

// Buffer is a request: Size bytes alive from step First to step Last, both inclusive. Steps are
// whatever the caller orders execution by (lower uses barrier levels, so that two buffers that
// may be in use by concurrently running dispatches never overlap).
type Buffer struct {
	Size        uint64
	First, Last int
}

// Overlaps reports whether the lifetimes of a and b intersect.
func (a Buffer) Overlaps(b Buffer) bool { return a.First <= b.Last && b.First <= a.Last }

// Assign returns a byte offset for every buffer (a multiple of align, a power of two) and the
// arena size. Buffers are placed largest first (ties: longer lifetime, then index), each in the
// smallest gap between the already placed buffers whose lifetimes intersect its own, or above
// them all. This is the greedy-by-size heuristic of TensorFlow Lite's arena planner: not optimal
// (the problem is NP-hard), usually within a few percent of the peak of live bytes. Its cost is
// O(n²) in the number of buffers, which is fine for the few thousand of a large model.
//
//	off, size := memplan.Assign([]memplan.Buffer{{Size: 100, First: 0, Last: 1}, {Size: 100, First: 2, Last: 3}}, 16)
//	// off == [0 0], size == 112: the second buffer reuses the first one's bytes
func Assign(bufs []Buffer, align uint64) (offsets []uint64, size uint64) {
	return AssignWithin(bufs, align, 0)
}

// AssignWithin is Assign for an arena cut into device buffers of limit bytes (a multiple of
// align; 0: no limit): no buffer crosses a multiple of limit. A gap or the space above the placed
// buffers that a buffer would cross one in is skipped up to the multiple. Buffers larger than
// limit are the caller's to refuse (lower splits or refuses them before it plans); one is placed
// at a multiple of limit and crosses the next. Without a limit, or when everything fits below
// it, the offsets are Assign's.
func AssignWithin(bufs []Buffer, align, limit uint64) (offsets []uint64, size uint64) {
	if align == 0 {
		align = 1
	}
	up := func(x uint64) uint64 { return (x + align - 1) / align * align }
	order := make([]int, len(bufs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := bufs[order[a]], bufs[order[b]]
		if x.Size != y.Size {
			return x.Size > y.Size
		}
		if lx, ly := x.Last-x.First, y.Last-y.First; lx != ly {
			return lx > ly
		}
		return order[a] < order[b]
	})
	offsets = make([]uint64, len(bufs))
	type placed struct{ off, end uint64 }
	var done []int // indices of placed buffers
	var busy []placed
	for _, i := range order {
		b := bufs[i]
		n := up(max(b.Size, 1))
		busy = busy[:0]
		for _, j := range done {
			if bufs[j].Overlaps(b) {
				busy = append(busy, placed{offsets[j], offsets[j] + up(max(bufs[j].Size, 1))})
			}
		}
		sort.Slice(busy, func(a, c int) bool { return busy[a].off < busy[c].off })
		// within moves a start that would make [at, at+n) cross a multiple of limit up to it.
		within := func(at uint64) uint64 {
			if limit == 0 || n > limit || at/limit == (at+n-1)/limit {
				return at
			}
			return (at + n - 1) / limit * limit
		}
		best, bestGap, found := uint64(0), uint64(0), false
		cur := uint64(0)
		for _, p := range busy {
			if at := within(cur); p.off > at {
				if gap := p.off - cur; p.off-at >= n && (!found || gap < bestGap) {
					best, bestGap, found = at, gap, true
				}
			}
			cur = max(cur, p.end)
		}
		if !found {
			best = within(cur)
			if limit > 0 && n > limit && best%limit != 0 {
				best = (best + limit - 1) / limit * limit
			}
		}
		offsets[i] = best
		size = max(size, best+n)
		done = append(done, i)
	}
	return offsets, size
}
