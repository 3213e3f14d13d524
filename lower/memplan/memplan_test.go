package memplan

import (
	"math/rand"
	"testing"
)

// check verifies the plan: aligned offsets, everything inside the arena, and no two buffers with
// intersecting lifetimes sharing a byte.
func check(t *testing.T, bufs []Buffer, off []uint64, size, align uint64) {
	t.Helper()
	for i, b := range bufs {
		if off[i]%align != 0 {
			t.Errorf("buffer %d at %d, not a multiple of %d", i, off[i], align)
		}
		if off[i]+b.Size > size {
			t.Errorf("buffer %d [%d, %d) outside the %d-byte arena", i, off[i], off[i]+b.Size, size)
		}
		for j := 0; j < i; j++ {
			c := bufs[j]
			if b.Overlaps(c) && off[i] < off[j]+c.Size && off[j] < off[i]+b.Size {
				t.Errorf("buffers %d %+v at %d and %d %+v at %d are alive together and overlap", i, b, off[i], j, c, off[j])
			}
		}
	}
}

func TestAssignHandMade(t *testing.T) {
	for _, c := range []struct {
		name  string
		bufs  []Buffer
		align uint64
		want  uint64 // arena size
	}{
		{"disjoint lifetimes reuse", []Buffer{{100, 0, 1}, {100, 2, 3}, {100, 4, 5}}, 16, 112},
		{"all alive", []Buffer{{100, 0, 5}, {50, 1, 2}, {30, 2, 4}}, 16, 112 + 64 + 32},
		// a chain a→b→c: a and c can share, b sits beside them
		{"chain", []Buffer{{64, 0, 1}, {64, 1, 2}, {64, 2, 3}}, 64, 128},
		// the small late buffer fits in the gap the freed large one leaves
		{"gap", []Buffer{{256, 0, 1}, {64, 0, 3}, {128, 2, 3}}, 64, 320},
		{"unaligned sizes", []Buffer{{3, 0, 0}, {5, 0, 0}, {7, 0, 0}}, 4, 4 + 8 + 8},
		{"empty", nil, 16, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			off, size := Assign(c.bufs, c.align)
			check(t, c.bufs, off, size, c.align)
			if size != c.want {
				t.Errorf("arena %d bytes, want %d (offsets %v)", size, c.want, off)
			}
		})
	}
}

// On random lifetimes the arena is never more than the sum and never less than the peak of live
// bytes, and no live buffers overlap.
func TestAssignRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.Intn(40)
		bufs := make([]Buffer, n)
		var sum uint64
		for i := range bufs {
			f := rng.Intn(30)
			bufs[i] = Buffer{Size: uint64(1 + rng.Intn(5000)), First: f, Last: f + rng.Intn(6)}
			sum += (bufs[i].Size + 255) &^ 255
		}
		off, size := Assign(bufs, 256)
		check(t, bufs, off, size, 256)
		var peak uint64
		for s := 0; s < 40; s++ {
			var live uint64
			for _, b := range bufs {
				if b.First <= s && s <= b.Last {
					live += (b.Size + 255) &^ 255
				}
			}
			peak = max(peak, live)
		}
		if size > sum || size < peak {
			t.Fatalf("trial %d: arena %d outside [peak %d, sum %d]", trial, size, peak, sum)
		}
	}
}

// AssignWithin keeps every buffer inside one multiple of the limit, on random lifetimes, and
// gives Assign's offsets when the limit is no constraint.
func TestAssignWithin(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.Intn(40)
		bufs := make([]Buffer, n)
		for i := range bufs {
			first := rng.Intn(20)
			bufs[i] = Buffer{Size: uint64(1 + rng.Intn(1000)), First: first, Last: first + rng.Intn(8)}
		}
		const align = 16
		limit := uint64(1024) * uint64(1+rng.Intn(3))
		off, size := AssignWithin(bufs, align, limit)
		check(t, bufs, off, size, align)
		for i, b := range bufs {
			if off[i]/limit != (off[i]+b.Size-1)/limit {
				t.Fatalf("trial %d: buffer %d [%d, %d) crosses a multiple of %d", trial, i, off[i], off[i]+b.Size, limit)
			}
		}
		o1, s1 := Assign(bufs, align)
		o2, s2 := AssignWithin(bufs, align, s1+uint64(rng.Intn(3))*align)
		if s1 != s2 || !equal(o1, o2) {
			t.Fatalf("trial %d: a limit above the arena (%d) changed the plan: %v %d vs %v %d", trial, s1, o2, s2, o1, s1)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
