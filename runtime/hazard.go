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
	RAW HazardKind = iota + 1 // the later dispatch reads what the earlier wrote
	WAR                       // the later dispatch overwrites what the earlier read
	WAW                       // both write
)

func (k HazardKind) String() string {
	switch k {
	case RAW:
		return "RAW"
	case WAR:
		return "WAR"
	case WAW:
		return "WAW"
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
// Cost: every use is compared with the earlier uses of the same memory object, so a program of n
// dispatches touching one arena costs O(n²) overlap tests; a few thousand dispatches take
// milliseconds, once, at record time.
func Analyze(uses [][]Use, reorder bool) Schedule {
	n := len(uses)
	s := Schedule{Interval: make([]int, n)}
	type prior struct {
		u        Use
		dispatch int
	}
	byMem := map[uint64][]prior{}
	causeOf := make([]Hazard, n)
	last := 0 // interval of the previous dispatch (program order mode)
	for j, us := range uses {
		level := 0
		if !reorder {
			level = last
		}
		var cause Hazard
		for _, u := range us {
			for _, p := range byMem[u.Mem] {
				k := hazardOf(p.u, u)
				if k == 0 || !p.u.overlaps(u) {
					continue
				}
				if l := s.Interval[p.dispatch] + 1; l > level || (l == level && cause.Kind == 0) {
					lo := max(p.u.Offset, u.Offset)
					hi := min(p.u.Offset+p.u.Size, u.Offset+u.Size)
					cause = Hazard{Kind: k, From: p.dispatch, To: j, Mem: u.Mem, Offset: lo, Size: hi - lo}
					level = l
				}
			}
		}
		s.Interval[j] = level
		causeOf[j] = cause
		last = level
		for _, u := range us {
			if u.Size > 0 {
				byMem[u.Mem] = append(byMem[u.Mem], prior{u, j})
			}
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
