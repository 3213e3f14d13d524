package egraph

import "math"

// greedyDAG is the first phase of Extract: extraction-gym's "greedy DAG" extractor, in the order
// of Knuth's generalisation of Dijkstra's algorithm.
//
// Every class gets a cost set, the sub-DAG below it under the choices made so far (class → cost
// of its chosen node), and its cost is that set's sum, each shared class counted once. A node's
// candidate cost is its own cost plus the sum of the union of its children's sets. Classes are
// settled in increasing order of cost: a class is settled with its cheapest candidate whose
// children are all settled, and settling it makes the nodes that use it candidates once their
// other children are settled too. A candidate's cost is at least each child's (costs are >= 0
// and the union contains each child's set), so no candidate that becomes ready later could have
// been cheaper: each class is settled once, and each node's union is computed once.
//
// What it guarantees: the selection is acyclic (a class chooses only among nodes whose children
// were settled before it), uses no +Inf node, settles every class that has a finite term, and
// e.best holds each settled class's exact DAG cost under the selection. What it does not: the
// optimum. A class picks the node whose own sub-DAG is cheapest, not the one whose sub-DAG
// shares most with what the rest of the selection needs (q, k and v each prefer their own
// linear over a slice of one merged linear); the local search after it repairs what one class
// can change alone.
//
// Ties (costs within a relative 1e-12, which absorbs the rounding of sums of equal content)
// go to the node that comes first in its class's canonical order, when both are ready.
func (e *extractor) greedyDAG(own [][]float64) {
	g := e.g
	n := len(e.best)
	sh := newSetShape(n)
	// Users of each class: (parent class, node index) for each distinct child, in CSR form,
	// and per node the number of distinct children not yet settled.
	offset := make([]int32, n+1) // offset[c]: index of c's first node in pending
	count := make([]int32, n+1)  // users per child, then its start in users
	total := 0
	for c := 0; c < n; c++ {
		offset[c] = int32(total)
		if cl := g.classes[c]; cl != nil {
			for _, nd := range cl.nodes {
				forDistinct(nd.Children, func(ch Id) { count[ch]++ })
			}
			total += len(cl.nodes)
		}
	}
	offset[n] = int32(total)
	pending := make([]int32, total)
	start := make([]int32, n+1)
	for c := 0; c < n; c++ {
		start[c+1] = start[c] + count[c]
	}
	type use struct {
		c Id
		j int32
	}
	users := make([]use, start[n])
	fill := append([]int32(nil), start[:n]...)
	for c := 0; c < n; c++ {
		cl := g.classes[c]
		if cl == nil {
			continue
		}
		for j, nd := range cl.nodes {
			k := int32(0)
			forDistinct(nd.Children, func(ch Id) {
				users[fill[ch]] = use{Id(c), int32(j)}
				fill[ch]++
				k++
			})
			pending[offset[c]+int32(j)] = k
		}
	}

	sets := make([]*costSet, n)    // settled classes' sets (their own entry included)
	cand := make([]*costSet, n)    // the best candidate's union of its children's sets
	candCost := make([]float64, n) // the best candidate's cost
	settled := make([]bool, n)
	for i := range e.best {
		e.best[i], e.choice[i], candCost[i] = math.Inf(1), -1, math.Inf(1)
	}
	q := &settleQueue{}
	offer := func(c Id, j int) {
		if settled[c] || math.IsInf(own[c][j], 1) {
			return
		}
		var u *costSet
		for _, ch := range g.classes[c].nodes[j].Children {
			u = sh.union(u, sets[ch], 0)
		}
		v := own[c][j]
		if u != nil {
			v += u.sum
		}
		old := candCost[c]
		tol := 1e-12 * math.Max(1, math.Abs(old))
		if math.IsInf(old, 1) || v < old-tol || (v <= old+tol && j < e.choice[c]) {
			cand[c], candCost[c], e.choice[c] = u, v, j
			q.push(settleItem{v, c})
		}
	}
	for c := 0; c < n; c++ {
		if cl := g.classes[c]; cl != nil {
			for j := range cl.nodes {
				if pending[offset[c]+int32(j)] == 0 {
					offer(Id(c), j)
				}
			}
		}
	}
	for len(*q) > 0 {
		it := q.pop()
		c := it.c
		if settled[c] {
			continue
		}
		settled[c] = true
		sets[c] = sh.insert(cand[c], 0, c, own[c][e.choice[c]])
		cand[c] = nil
		e.best[c] = sets[c].sum
		for _, u := range users[start[c]:start[c+1]] {
			p := &pending[offset[u.c]+u.j]
			if *p--; *p == 0 {
				offer(u.c, int(u.j))
			}
		}
	}
	for c := range e.choice {
		if !settled[c] {
			e.choice[c] = -1
		}
	}
}

// forDistinct calls f once for each distinct id of children (a node lists a child once per
// argument; few nodes have more than a handful).
func forDistinct(children []Id, f func(Id)) {
	for i, ch := range children {
		dup := false
		for _, p := range children[:i] {
			if p == ch {
				dup = true
				break
			}
		}
		if !dup {
			f(ch)
		}
	}
}

type settleItem struct {
	cost float64
	c    Id
}

// settleQueue is a binary min-heap of candidates by cost, then class id (deterministic).
type settleQueue []settleItem

func (q settleQueue) less(i, j int) bool {
	if q[i].cost != q[j].cost {
		return q[i].cost < q[j].cost
	}
	return q[i].c < q[j].c
}

func (q *settleQueue) push(it settleItem) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *settleQueue) pop() settleItem {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h.less(l, m) {
			m = l
		}
		if r < len(h) && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
