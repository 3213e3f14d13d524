package egraph

// Id names an e-class. Ids are dense small integers handed out by Add; after a union only the root
// (Find) of a set is canonical.
type Id uint32

// unionFind is a disjoint-set forest over Ids with path halving. It has no ranks: the e-graph
// decides which root survives a union (the class with more parents, as egg does), so that the
// larger parent list is not copied.
type unionFind struct {
	parent []Id
}

// makeSet adds a singleton set and returns its id.
func (u *unionFind) makeSet() Id {
	id := Id(len(u.parent))
	u.parent = append(u.parent, id)
	return id
}

// size is the number of ids ever made.
func (u *unionFind) size() int { return len(u.parent) }

// find returns the root of id's set, halving the path on the way (every other node is pointed at
// its grandparent), which gives the same amortised bound as full compression without recursion.
func (u *unionFind) find(id Id) Id {
	for u.parent[id] != id {
		u.parent[id] = u.parent[u.parent[id]]
		id = u.parent[id]
	}
	return id
}

// union makes root the parent of other; both must be roots. It returns root.
func (u *unionFind) union(root, other Id) Id {
	u.parent[other] = root
	return root
}
