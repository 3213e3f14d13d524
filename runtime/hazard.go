package runtime

import (
	"fmt"
	"sort"
)

// This file is the pure-Go half of program recording: which dispatches depend on which, and
// where the barriers go. It knows nothing about Vulkan, so it is tested on hand-made lists.

// Use is one dispatch's access to a byte range of a memory object (Mem identifies the object:
// ranges of different objects never overlap).
type Use struct {
	Mem          uint64
	Offset, Size uint64
	Write        bool
}

func (u Use) overlaps(v Use) bool {
	return u.Mem == v.Mem && u.Offset < v.Offset+v.Size && v.Offset < u.Offset+u.Size
}

// HazardKind classifies a dependency between two dispatches.
type HazardKind uint8

const (
	RAW   HazardKind = iota + 1 // the later dispatch reads what the earlier wrote
	WAR                         // the later dispatch overwrites what the earlier read
	WAW                         // both write
	Fence                       // the later dispatch asked to wait for every earlier one
)

func (k HazardKind) String() string {
	switch k {
	case RAW:
		return "RAW"
	case WAR:
		return "WAR"
	case WAW:
		return "WAW"
	case Fence:
		return "fence"
	}
	return "none"
}

// Hazard is a dependency of dispatch To on the earlier dispatch From (indices into the input
// list), over the overlapping byte range [Offset, Offset+Size) of Mem.
type Hazard struct {
	Kind         HazardKind
	From, To     int
	Mem          uint64
	Offset, Size uint64
}

func (h Hazard) String() string {
	return fmt.Sprintf("%s %d->%d mem %d [%d,%d)", h.Kind, h.From, h.To, h.Mem, h.Offset, h.Offset+h.Size)
}

func hazardOf(earlier, later Use) HazardKind {
	switch {
	case earlier.Write && later.Write:
		return WAW
	case earlier.Write:
		return RAW
	case later.Write:
		return WAR
	}
	return 0
}

// Schedule is the result of Analyze: the recorded order and the barrier intervals.
//
// Dispatches in one interval have no hazard among them and run with no barrier between them; one
// global memory barrier separates consecutive intervals, so Barriers = len(Intervals)-1.
type Schedule struct {
	Intervals [][]int  // dispatch indices (into the input list) per interval, in recorded order
	Order     []int    // the concatenation of Intervals
	Interval  []int    // Interval[i]: the interval of dispatch i
	Cause     []Hazard // per interval after the first: a hazard that forces its barrier
	Barriers  int
}

// Analyze finds the read-after-write, write-after-read and write-after-write hazards between
// dispatches (uses[i] lists dispatch i's accesses; accesses within one dispatch never conflict
// with each other) and places barriers.
//
// With reorder, each dispatch goes to the earliest interval after every dispatch it depends on
// (as soon as possible list scheduling). The number of barriers is then the length of the
// longest dependency chain minus one, which no order can beat; independent work, such as the Q, K
// and V projections of a layer, shares an interval. Without reorder the program order is kept
// and a barrier is placed only before a dispatch that depends on one since the last barrier.
//
// Cost: each memory object keeps a sorted map from byte ranges to the latest interval that
// wrote and read them, so a use costs a binary search plus the segments it overlaps; a program of
// n dispatches over an arena of k distinct slots costs O(n·k) at worst, usually far less.
func Analyze(uses [][]Use, reorder bool) Schedule { return AnalyzeFenced(uses, nil, reorder) }

// AnalyzeFenced is Analyze where fence[j] additionally makes dispatch j wait for every earlier
// dispatch (a plan's explicit BarrierBefore), whatever the hazards say. Later dispatches are
// not held back by it.
func AnalyzeFenced(uses [][]Use, fence []bool, reorder bool) Schedule {
	n := len(uses)
	top, topDispatch := -1, -1 // highest interval used so far, and a dispatch in it
	s := Schedule{Interval: make([]int, n)}
	maps := map[uint64]*segMap{}
	causeOf := make([]Hazard, n)
	last := 0 // interval of the previous dispatch (program order mode)
	for j, us := range uses {
		level := 0
		if !reorder {
			level = last
		}
		var cause Hazard
		if j < len(fence) && fence[j] && j > 0 && top+1 > level {
			level = top + 1
			cause = Hazard{Kind: Fence, From: topDispatch, To: j}
		}
		for _, u := range us {
			m := maps[u.Mem]
			if m == nil || u.Size == 0 {
				continue
			}
			m.visit(u.Offset, u.Offset+u.Size, func(g *seg) {
				// A read conflicts with earlier writes; a write with earlier reads and writes.
				try := func(kind HazardKind, l, from int) {
					if l < 0 {
						return
					}
					if l+1 > level || (l+1 == level && cause.Kind == 0) {
						lo, hi := max(g.lo, u.Offset), min(g.hi, u.Offset+u.Size)
						cause = Hazard{Kind: kind, From: from, To: j, Mem: u.Mem, Offset: lo, Size: hi - lo}
						level = l + 1
					}
				}
				if u.Write {
					try(WAW, g.w, g.wd)
					try(WAR, g.r, g.rd)
				} else {
					try(RAW, g.w, g.wd)
				}
			})
		}
		s.Interval[j] = level
		causeOf[j] = cause
		last = level
		if level > top {
			top, topDispatch = level, j
		}
		for _, u := range us {
			if u.Size == 0 {
				continue
			}
			m := maps[u.Mem]
			if m == nil {
				m = &segMap{}
				maps[u.Mem] = m
			}
			m.record(u.Offset, u.Offset+u.Size, u.Write, level, j)
		}
	}
	levels := 0
	for _, l := range s.Interval {
		levels = max(levels, l+1)
	}
	s.Intervals = make([][]int, levels)
	for j, l := range s.Interval {
		s.Intervals[l] = append(s.Intervals[l], j)
	}
	for l, iv := range s.Intervals {
		s.Order = append(s.Order, iv...)
		if l == 0 {
			continue
		}
		// The cause of interval l: a hazard of one of its dispatches on interval l-1.
		for _, j := range iv {
			if c := causeOf[j]; c.Kind != 0 && s.Interval[c.From] == l-1 {
				s.Cause = append(s.Cause, c)
				break
			}
		}
	}
	if levels > 0 {
		s.Barriers = levels - 1
	}
	return s
}

// seg is a byte range [lo, hi) of one memory object with the highest interval that wrote it (w,
// by dispatch wd) and read it (r, by rd); -1: never. Only the maximum matters: a later use must
// follow the latest conflicting interval.
type seg struct {
	lo, hi uint64
	w, r   int
	wd, rd int
}

// segMap is a sorted list of disjoint segments.
type segMap struct{ segs []seg }

// visit calls f on each segment overlapping [lo, hi).
func (m *segMap) visit(lo, hi uint64, f func(*seg)) {
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].hi > lo })
	for ; i < len(m.segs) && m.segs[i].lo < hi; i++ {
		f(&m.segs[i])
	}
}

// record notes an access of [lo, hi) in interval level by dispatch d.
func (m *segMap) record(lo, hi uint64, write bool, level, d int) {
	a := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].hi > lo })
	b := a
	for b < len(m.segs) && m.segs[b].lo < hi {
		b++
	}
	// Rebuild segments a..b-1 with [lo, hi) split out and its gaps filled.
	var out []seg
	pos := lo
	for _, g := range m.segs[a:b] {
		if g.lo < lo {
			left := g
			left.hi = lo
			out = append(out, left)
			g.lo = lo
		}
		if g.lo > pos {
			out = append(out, seg{lo: pos, hi: g.lo, w: -1, r: -1})
		}
		var right *seg
		if g.hi > hi {
			rs := g
			rs.lo = hi
			right = &rs
			g.hi = hi
		}
		out = append(out, g)
		pos = g.hi
		if right != nil {
			out = append(out, *right)
		}
	}
	if pos < hi {
		out = append(out, seg{lo: pos, hi: hi, w: -1, r: -1})
	}
	for i := range out {
		g := &out[i]
		if g.lo >= lo && g.hi <= hi {
			if write && level >= g.w {
				g.w, g.wd = level, d
			}
			if !write && level >= g.r {
				g.r, g.rd = level, d
			}
		}
	}
	m.segs = append(m.segs[:a], append(out, m.segs[b:]...)...)
}

// Hazards lists every pair of dispatches with a hazard (for diagnostics and tests; O(n²) pairs in
// the worst case), sorted by (To, From).
func Hazards(uses [][]Use) []Hazard {
	var out []Hazard
	for j := range uses {
		for i := 0; i < j; i++ {
			for _, a := range uses[i] {
				found := false
				for _, b := range uses[j] {
					if k := hazardOf(a, b); k != 0 && a.overlaps(b) {
						lo := max(a.Offset, b.Offset)
						hi := min(a.Offset+a.Size, b.Offset+b.Size)
						out = append(out, Hazard{Kind: k, From: i, To: j, Mem: a.Mem, Offset: lo, Size: hi - lo})
						found = true
						break
					}
				}
				if found {
					break
				}
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].To != out[b].To {
			return out[a].To < out[b].To
		}
		return out[a].From < out[b].From
	})
	return out
}
