package egraph

import (
	"math/rand"
	"testing"
)

// TestCostSetMatchesMap builds random sets by insert and union, sharing earlier sets as
// operands the way the greedy extractor does, and checks each against a plain map: contents,
// sum, and that a union with a subset returns the larger operand itself.
func TestCostSetMatchesMap(t *testing.T) {
	for _, classes := range []int{1, 31, 32, 33, 1500, 40000} {
		rng := rand.New(rand.NewSource(int64(classes)))
		sh := newSetShape(classes)
		var sets []*costSet
		var maps []map[Id]float64
		value := func(id Id) float64 { return float64(id%7) + 0.25 } // one value per class
		for i := 0; i < 300; i++ {
			var s *costSet
			m := map[Id]float64{}
			if len(sets) > 0 && rng.Intn(3) > 0 {
				a, b := rng.Intn(len(sets)), rng.Intn(len(sets))
				s = sh.union(sets[a], sets[b], 0)
				for k, v := range maps[a] {
					m[k] = v
				}
				for k, v := range maps[b] {
					m[k] = v
				}
				if len(m) == len(maps[a]) && s != sets[a] {
					t.Fatalf("%d classes: union with a subset built a new set", classes)
				}
			}
			for k := rng.Intn(4); k > 0; k-- {
				id := Id(rng.Intn(classes))
				s = sh.insert(s, 0, id, value(id))
				m[id] = value(id)
			}
			want := 0.0
			got := map[Id]float64{}
			last := Id(0)
			first := true
			sh.each(s, 0, 0, func(id Id, v float64) {
				if !first && id <= last {
					t.Fatalf("%d classes: each out of order: %d after %d", classes, id, last)
				}
				first, last = false, id
				got[id] = v
				want += v
			})
			if len(got) != len(m) {
				t.Fatalf("%d classes, set %d: %d entries, want %d", classes, i, len(got), len(m))
			}
			for k, v := range m {
				if got[k] != v {
					t.Fatalf("%d classes, set %d: class %d = %v, want %v", classes, i, k, got[k], v)
				}
			}
			if s != nil && s.sum != want {
				t.Fatalf("%d classes, set %d: sum %v, want %v", classes, i, s.sum, want)
			}
			sets, maps = append(sets, s), append(maps, m)
		}
	}
}
