package egraph

import "math"

// localSearch is the incremental form of the DAG improvement phase: it keeps, for the current
// selection, a reference count per class (how many chosen nodes of live classes, and roots, use
// it) and the DAG cost, so that trying one class's alternative costs time proportional to the
// part of the selection that changes, not to the whole selection.
//
// Cycles: a switch of class c to node b closes a cycle only if c, or a cycle among classes that
// were not live, is reachable from b's children. Live classes carry a topological label (lvl:
// every live chosen edge goes from a higher to a lower label), so the search from b's children
// stops at any live class labelled no higher than c, which cannot reach c. Labels start as
// heights times a gap, so that raising one label after an accepted switch rarely has to raise
// its parents.
type localSearch struct {
	e     *extractor
	own   [][]float64
	rc    []int32
	lvl   []int64
	total float64
	log   []rcChange
	stamp []uint32 // DFS marks for the cycle check: gen*2 = grey (on stack), gen*2+1 = done
	gen   uint32
}

type rcChange struct {
	c  Id
	rc int32
}

const lvlGap = 1 << 10

func newLocalSearch(e *extractor, own [][]float64) *localSearch {
	n := len(e.choice)
	s := &localSearch{e: e, own: own, rc: make([]int32, n), lvl: make([]int64, n), stamp: make([]uint32, n)}
	for _, r := range e.roots {
		s.inc(r)
	}
	s.log = s.log[:0]
	// Heights, in post-order: children before parents.
	for _, c := range e.reachable(e.choice) {
		h := int64(0)
		for _, ch := range s.node(c).Children {
			h = max(h, s.lvl[ch])
		}
		s.lvl[c] = h + lvlGap
	}
	return s
}

func (s *localSearch) node(c Id) Node { return s.e.g.classes[c].nodes[s.e.choice[c]] }

// inc adds a reference to c; a class becoming live adds its cost and references its children,
// and gets a label above them.
func (s *localSearch) inc(c Id) {
	s.log = append(s.log, rcChange{c, s.rc[c]})
	s.rc[c]++
	if s.rc[c] != 1 {
		return
	}
	s.total += s.own[c][s.e.choice[c]]
	h := int64(0)
	for _, ch := range s.node(c).Children {
		s.inc(ch)
		h = max(h, s.lvl[ch])
	}
	s.lvl[c] = h + 1
}

// dec removes a reference to c; a class becoming dead removes its cost and its references.
func (s *localSearch) dec(c Id) {
	s.log = append(s.log, rcChange{c, s.rc[c]})
	s.rc[c]--
	if s.rc[c] != 0 {
		return
	}
	s.total -= s.own[c][s.e.choice[c]]
	for _, ch := range s.node(c).Children {
		s.dec(ch)
	}
}

// closesCycle reports whether choosing node b for live class c would make the selection cyclic.
func (s *localSearch) closesCycle(c Id, b Node) bool {
	s.gen++
	grey, done := s.gen*2, s.gen*2+1
	if s.gen >= math.MaxUint32/2-1 {
		clear(s.stamp)
		s.gen = 1
		grey, done = 2, 3
	}
	var visit func(k Id) bool
	visit = func(k Id) bool {
		if k == c {
			return true
		}
		if s.rc[k] > 0 && s.lvl[k] <= s.lvl[c] {
			return false // live and below c: cannot reach c, and the live part is acyclic
		}
		switch s.stamp[k] {
		case grey:
			return true // a cycle among classes that were dead
		case done:
			return false
		}
		s.stamp[k] = grey
		for _, ch := range s.node(k).Children {
			if visit(ch) {
				return true
			}
		}
		s.stamp[k] = done
		return false
	}
	for _, k := range b.Children {
		if visit(k) {
			return true
		}
	}
	return false
}

// price returns the DAG cost of the selection with live class c switched to node j (+Inf when
// that closes a cycle), leaving the selection unchanged.
func (s *localSearch) price(c Id, j int) float64 {
	v, _ := s.try(c, j, math.Inf(-1))
	return v
}

// try switches live class c to node j and keeps the switch if the DAG cost drops below cur by
// more than rounding; it returns the cost after the switch (kept or not) and whether it kept it.
func (s *localSearch) try(c Id, j int, cur float64) (float64, bool) {
	nodes := s.e.g.classes[c].nodes
	old := s.e.choice[c]
	if s.closesCycle(c, nodes[j]) {
		return math.Inf(1), false
	}
	s.log = s.log[:0]
	before := s.total
	// Reference the new children before releasing the old ones, so that a class both use
	// (the residual stream under a commuted add) never drops to zero and drags its whole
	// subgraph out and back in.
	for _, ch := range nodes[j].Children {
		s.inc(ch)
	}
	s.e.choice[c] = j
	s.total += s.own[c][j] - s.own[c][old]
	for _, ch := range nodes[old].Children {
		s.dec(ch)
	}
	if s.total < cur-1e-9*math.Max(1, math.Abs(cur)) {
		// Keep: make c's label exceed its new children's, raising live ancestors as needed.
		h := int64(0)
		for _, ch := range nodes[j].Children {
			h = max(h, s.lvl[ch])
		}
		s.raise(c, h+1)
		return s.total, true
	}
	after := s.total
	for i := len(s.log) - 1; i >= 0; i-- {
		s.rc[s.log[i].c] = s.log[i].rc
	}
	s.e.choice[c] = old
	s.total = before
	return after, false
}

// raise lifts c's label to at least l and restores the label order on its live parents.
func (s *localSearch) raise(c Id, l int64) {
	if s.lvl[c] >= l {
		return
	}
	s.lvl[c] = l
	for _, p := range s.e.g.classes[c].parents {
		pc := s.e.g.uf.find(p.class)
		if s.rc[pc] == 0 {
			continue
		}
		for _, ch := range s.node(pc).Children {
			if ch == c {
				s.raise(pc, l+1)
				break
			}
		}
	}
}

// improveLocal changes one class's choice at a time, keeping a change when the DAG cost of the
// whole selection drops: passes over the reachable classes, each alternative tried once per
// pass, until a pass improves nothing or maxPasses ran. Each trial is evaluated incrementally;
// the tests check it against improveDAG, which evaluates the whole selection per trial.
func (e *extractor) improveLocal(own [][]float64, maxPasses int) float64 {
	s := newLocalSearch(e, own)
	cur := s.total
	for pass := 0; pass < maxPasses; pass++ {
		improved := false
		for _, c := range e.reachable(e.choice) {
			nodes := e.g.classes[c].nodes
			if len(nodes) < 2 {
				continue
			}
			for j := range nodes {
				if s.rc[c] == 0 || j == e.choice[c] || math.IsInf(own[c][j], 1) || !e.childrenFinite(nodes[j]) {
					continue
				}
				if v, kept := s.try(c, j, cur); kept {
					cur, improved = v, true
				}
			}
		}
		if !improved {
			break
		}
	}
	return cur
}
