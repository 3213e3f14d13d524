package egraph

import "math/bits"

// costSet is a persistent map from a class to the cost of the node chosen there: the sub-DAG
// below one class under a selection, with the sum of its costs. It is a radix trie of fixed
// depth over the class id (32 ways per level), so a set's shape depends only on its contents,
// and each trie node caches the sum of its entries, added in key order: the sum of a set is a
// function of its contents, whatever order it was built in, and a superset never sums to less.
//
// Sets share structure: inserting copies one path, and union returns an operand's own subtrie
// wherever the operands' subtries are the same pointer or one contains the other. In a layered
// model every class's set is the set of the layer below plus a few classes, so the union of two
// children's sets costs time in proportion to where they differ, not to their size.
type costSet struct {
	sum  float64
	bits uint32     // which of the 32 slots are present
	kids []*costSet // present slots in order, above the last level
	vals []float64  // present slots in order, at the last level
}

const (
	setBits = 5
	setFan  = 1 << setBits
)

// setShape is the depth of the tries for one extraction (enough levels for every class id) and
// the arena their nodes are allocated from: one extraction allocates many small nodes that all
// live until it ends, so they come from chunks rather than one allocation each.
type setShape struct {
	levels int
	arena  *setArena
}

func newSetShape(classes int) setShape {
	l := 1
	for classes-1 >= 1<<(setBits*l) {
		l++
	}
	return setShape{levels: l, arena: &setArena{}}
}

type setArena struct {
	sets []costSet
	kids []*costSet
	vals []float64
}

// chunk returns the size of the next chunk after one of capacity c: doubling from 32 to 1024,
// so that a small graph's extraction does not allocate (and clear) more than it uses.
func chunk(c, need int) int { return max(need, min(1024, max(32, 2*c))) }

func (a *setArena) set() *costSet {
	if len(a.sets) == cap(a.sets) {
		a.sets = make([]costSet, 0, chunk(cap(a.sets), 1))
	}
	a.sets = a.sets[:len(a.sets)+1]
	return &a.sets[len(a.sets)-1]
}

// kidSlice and valSlice return slices of length 0 and capacity n.
func (a *setArena) kidSlice(n int) []*costSet {
	if cap(a.kids)-len(a.kids) < n {
		a.kids = make([]*costSet, 0, chunk(cap(a.kids), n))
	}
	l := len(a.kids)
	a.kids = a.kids[:l+n]
	return a.kids[l : l : l+n]
}

func (a *setArena) valSlice(n int) []float64 {
	if cap(a.vals)-len(a.vals) < n {
		a.vals = make([]float64, 0, chunk(cap(a.vals), n))
	}
	l := len(a.vals)
	a.vals = a.vals[:l+n]
	return a.vals[l : l : l+n]
}

func (sh setShape) slot(id Id, level int) uint32 {
	return uint32(id>>(setBits*(sh.levels-1-level))) & (setFan - 1)
}

// insert returns s with id mapped to v.
func (sh setShape) insert(s *costSet, level int, id Id, v float64) *costSet {
	bit := uint32(1) << sh.slot(id, level)
	var old uint32
	pos := 0
	if s != nil {
		old = s.bits
		pos = bits.OnesCount32(s.bits & (bit - 1))
	}
	has := old&bit != 0
	after := pos // the first old entry after id's
	if has {
		after++
	}
	if level == sh.levels-1 {
		if has && s.vals[pos] == v {
			return s
		}
		n := sh.arena.set()
		n.bits = old | bit
		n.vals = sh.arena.valSlice(bits.OnesCount32(n.bits))
		if s != nil {
			n.vals = append(n.vals, s.vals[:pos]...)
		}
		n.vals = append(n.vals, v)
		if s != nil {
			n.vals = append(n.vals, s.vals[after:]...)
		}
		for _, x := range n.vals {
			n.sum += x
		}
		return n
	}
	var child *costSet
	if has {
		child = s.kids[pos]
	}
	nc := sh.insert(child, level+1, id, v)
	if nc == child {
		return s
	}
	n := sh.arena.set()
	n.bits = old | bit
	n.kids = sh.arena.kidSlice(bits.OnesCount32(n.bits))
	if s != nil {
		n.kids = append(n.kids, s.kids[:pos]...)
	}
	n.kids = append(n.kids, nc)
	if s != nil {
		n.kids = append(n.kids, s.kids[after:]...)
	}
	for _, k := range n.kids {
		n.sum += k.sum
	}
	return n
}

// union returns the union of a and b. A class in both with different costs keeps the lower
// (this does not happen in the greedy extractor, where a class's set is fixed once chosen).
// Where the result equals an operand, that operand's trie is returned, so sharing survives.
func (sh setShape) union(a, b *costSet, level int) *costSet {
	switch {
	case a == b || b == nil:
		return a
	case a == nil:
		return b
	}
	all := a.bits | b.bits
	sameA, sameB := all == a.bits, all == b.bits
	ia, ib := 0, 0
	if level == sh.levels-1 {
		var vals [setFan]float64
		n := 0
		for m := all; m != 0; m &= m - 1 {
			bit := m & -m
			inA, inB := a.bits&bit != 0, b.bits&bit != 0
			var v float64
			switch {
			case inA && inB:
				v = min(a.vals[ia], b.vals[ib])
				sameA = sameA && v == a.vals[ia]
				sameB = sameB && v == b.vals[ib]
			case inA:
				v = a.vals[ia]
			default:
				v = b.vals[ib]
			}
			if inA {
				ia++
			}
			if inB {
				ib++
			}
			vals[n] = v
			n++
		}
		switch {
		case sameA:
			return a
		case sameB:
			return b
		}
		r := sh.arena.set()
		r.bits, r.vals = all, append(sh.arena.valSlice(n), vals[:n]...)
		for _, x := range r.vals {
			r.sum += x
		}
		return r
	}
	var kids [setFan]*costSet
	n := 0
	for m := all; m != 0; m &= m - 1 {
		bit := m & -m
		inA, inB := a.bits&bit != 0, b.bits&bit != 0
		var k *costSet
		switch {
		case inA && inB:
			k = sh.union(a.kids[ia], b.kids[ib], level+1)
			sameA = sameA && k == a.kids[ia]
			sameB = sameB && k == b.kids[ib]
		case inA:
			k = a.kids[ia]
		default:
			k = b.kids[ib]
		}
		if inA {
			ia++
		}
		if inB {
			ib++
		}
		kids[n] = k
		n++
	}
	switch {
	case sameA:
		return a
	case sameB:
		return b
	}
	r := sh.arena.set()
	r.bits, r.kids = all, append(sh.arena.kidSlice(n), kids[:n]...)
	for _, k := range r.kids {
		r.sum += k.sum
	}
	return r
}

// each calls f for every entry of s in class order.
func (sh setShape) each(s *costSet, level int, prefix Id, f func(Id, float64)) {
	if s == nil {
		return
	}
	i := 0
	for m := s.bits; m != 0; m &= m - 1 {
		slot := Id(bits.TrailingZeros32(m))
		id := prefix<<setBits | slot
		if level == sh.levels-1 {
			f(id, s.vals[i])
		} else {
			sh.each(s.kids[i], level+1, id, f)
		}
		i++
	}
}
