package runtime

import (
	"math/rand"
	"reflect"
	"testing"
)

// Hand-made dispatch lists: r and w are a read and a write of [off, off+size) of memory m.
func r(m, off, size uint64) Use { return Use{Mem: m, Offset: off, Size: size} }
func w(m, off, size uint64) Use { return Use{Mem: m, Offset: off, Size: size, Write: true} }

func TestAnalyzeHandMade(t *testing.T) {
	for _, tc := range []struct {
		name      string
		uses      [][]Use
		reorder   bool
		intervals [][]int
		causes    []HazardKind // the kind of hazard forcing each barrier
	}{
		{
			name:      "chain of RAW",
			uses:      [][]Use{{r(1, 0, 64), w(2, 0, 64)}, {r(2, 0, 64), w(3, 0, 64)}, {r(3, 0, 64), w(4, 0, 64)}},
			reorder:   true,
			intervals: [][]int{{0}, {1}, {2}},
			causes:    []HazardKind{RAW, RAW},
		},
		{
			name:      "disjoint ranges of one buffer need no barrier",
			uses:      [][]Use{{w(1, 0, 256)}, {w(1, 256, 256)}, {w(1, 512, 256)}},
			reorder:   true,
			intervals: [][]int{{0, 1, 2}},
		},
		{
			name:      "same offsets in different memory objects are independent",
			uses:      [][]Use{{w(1, 0, 256)}, {w(2, 0, 256)}, {r(3, 0, 256)}},
			reorder:   true,
			intervals: [][]int{{0, 1, 2}},
		},
		{
			name:      "partial overlap is a hazard, touching ranges are not",
			uses:      [][]Use{{w(1, 0, 100)}, {r(1, 100, 100), w(2, 0, 4)}, {r(1, 99, 2), w(3, 0, 4)}},
			reorder:   true,
			intervals: [][]int{{0, 1}, {2}},
			causes:    []HazardKind{RAW},
		},
		{
			name:      "reads never conflict",
			uses:      [][]Use{{r(1, 0, 64)}, {r(1, 0, 64)}, {r(1, 32, 64)}},
			reorder:   true,
			intervals: [][]int{{0, 1, 2}},
		},
		{
			name:      "write after read",
			uses:      [][]Use{{r(1, 0, 64), w(2, 0, 64)}, {w(1, 0, 64)}},
			reorder:   true,
			intervals: [][]int{{0}, {1}},
			causes:    []HazardKind{WAR},
		},
		{
			name:      "write after write",
			uses:      [][]Use{{w(1, 0, 64)}, {w(1, 32, 64)}},
			reorder:   true,
			intervals: [][]int{{0}, {1}},
			causes:    []HazardKind{WAW},
		},
		{
			// A: x=f(in); B: g(x); C: y=f(in2); D: g(y). In order: A | B C | D (2 barriers).
			// Reordered: A C | B D (1 barrier).
			name:      "two independent chains, program order",
			uses:      [][]Use{{w(1, 0, 64)}, {r(1, 0, 64), w(3, 0, 64)}, {w(2, 0, 64)}, {r(2, 0, 64), w(4, 0, 64)}},
			reorder:   false,
			intervals: [][]int{{0}, {1, 2}, {3}},
			causes:    []HazardKind{RAW, RAW},
		},
		{
			name:      "two independent chains, reordered",
			uses:      [][]Use{{w(1, 0, 64)}, {r(1, 0, 64), w(3, 0, 64)}, {w(2, 0, 64)}, {r(2, 0, 64), w(4, 0, 64)}},
			reorder:   true,
			intervals: [][]int{{0, 2}, {1, 3}},
			causes:    []HazardKind{RAW},
		},
		{
			// An attention block over one arena (mem 1): h=norm(x); q,k,v=proj(h); a=attn(q,k,v);
			// x+=o(a). The three projections share an interval.
			name: "attention block in one arena",
			uses: [][]Use{
				{r(1, 0, 256), w(1, 256, 256)},                                    // 0 norm: x -> h
				{r(1, 256, 256), r(2, 0, 1024), w(1, 512, 256)},                   // 1 q = h Wq
				{r(1, 256, 256), r(2, 1024, 1024), w(1, 768, 256)},                // 2 k = h Wk
				{r(1, 256, 256), r(2, 2048, 1024), w(1, 1024, 256)},               // 3 v = h Wv
				{r(1, 512, 256), r(1, 768, 256), r(1, 1024, 256), w(1, 256, 256)}, // 4 a -> h's slot (WAR on h)
				{r(1, 256, 256), r(2, 3072, 1024), w(1, 0, 256)},                  // 5 x += a Wo
			},
			reorder:   true,
			intervals: [][]int{{0}, {1, 2, 3}, {4}, {5}},
			causes:    []HazardKind{RAW, RAW, RAW},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Analyze(tc.uses, tc.reorder)
			if !reflect.DeepEqual(s.Intervals, tc.intervals) {
				t.Fatalf("intervals %v, want %v", s.Intervals, tc.intervals)
			}
			if s.Barriers != len(tc.intervals)-1 {
				t.Errorf("%d barriers, want %d", s.Barriers, len(tc.intervals)-1)
			}
			var kinds []HazardKind
			for _, c := range s.Cause {
				kinds = append(kinds, c.Kind)
				if s.Interval[c.From]+1 != s.Interval[c.To] {
					t.Errorf("cause %v does not cross one barrier", c)
				}
			}
			if !reflect.DeepEqual(kinds, tc.causes) {
				t.Errorf("barrier causes %v, want %v (%v)", kinds, tc.causes, s.Cause)
			}
			checkSchedule(t, tc.uses, s)
		})
	}
}

func TestAnalyzeFenced(t *testing.T) {
	// 0 and 1 are independent; 2 is independent too but fenced; 3 is independent of all.
	uses := [][]Use{{w(1, 0, 64)}, {w(2, 0, 64)}, {w(3, 0, 64)}, {w(4, 0, 64)}}
	s := AnalyzeFenced(uses, []bool{false, false, true, false}, true)
	if want := [][]int{{0, 1, 3}, {2}}; !reflect.DeepEqual(s.Intervals, want) {
		t.Errorf("reordered: intervals %v, want %v", s.Intervals, want)
	}
	if len(s.Cause) != 1 || s.Cause[0].Kind != Fence || s.Interval[s.Cause[0].From] != 0 {
		t.Errorf("cause %v", s.Cause)
	}
	s = AnalyzeFenced(uses, []bool{false, false, true, false}, false)
	if want := [][]int{{0, 1}, {2, 3}}; !reflect.DeepEqual(s.Intervals, want) {
		t.Errorf("program order: intervals %v, want %v", s.Intervals, want)
	}
	// A fence on the first dispatch is a no-op.
	if s := AnalyzeFenced(uses, []bool{true}, true); s.Barriers != 0 {
		t.Errorf("fence on dispatch 0: %d barriers", s.Barriers)
	}
}

func TestHazardsList(t *testing.T) {
	got := Hazards([][]Use{{w(1, 0, 100)}, {r(1, 50, 100)}, {w(1, 120, 10)}, {r(2, 0, 1)}})
	want := []Hazard{
		{Kind: RAW, From: 0, To: 1, Mem: 1, Offset: 50, Size: 50},
		{Kind: WAR, From: 1, To: 2, Mem: 1, Offset: 120, Size: 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Hazards = %v, want %v", got, want)
	}
}

// checkSchedule verifies a schedule against the full hazard list: every hazard crosses at least
// one barrier, Order is a permutation consistent with Intervals, and (reordered or not) no
// interval holds both ends of a hazard.
func checkSchedule(t *testing.T, uses [][]Use, s Schedule) {
	t.Helper()
	seen := make([]bool, len(uses))
	k := 0
	for l, iv := range s.Intervals {
		for _, i := range iv {
			if seen[i] || s.Interval[i] != l || s.Order[k] != i {
				t.Fatalf("order %v / intervals %v inconsistent at dispatch %d", s.Order, s.Intervals, i)
			}
			seen[i] = true
			k++
		}
	}
	if k != len(uses) {
		t.Fatalf("%d of %d dispatches scheduled", k, len(uses))
	}
	for _, h := range Hazards(uses) {
		if s.Interval[h.From] >= s.Interval[h.To] {
			t.Fatalf("hazard %v not separated: intervals %d and %d", h, s.Interval[h.From], s.Interval[h.To])
		}
	}
}

// TestAnalyzeRandom: random programs over a few buffers; both modes must separate every hazard,
// and reordering reaches the lower bound (longest dependency chain) and never needs more barriers
// than program order.
func TestAnalyzeRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 300; iter++ {
		n := 1 + rng.Intn(30)
		uses := make([][]Use, n)
		for i := range uses {
			for b := 0; b < 1+rng.Intn(4); b++ {
				off := uint64(rng.Intn(16)) * 64
				uses[i] = append(uses[i], Use{Mem: uint64(rng.Intn(3)), Offset: off, Size: uint64(1+rng.Intn(4)) * 64, Write: rng.Intn(3) == 0})
			}
		}
		in, re := Analyze(uses, false), Analyze(uses, true)
		checkSchedule(t, uses, in)
		checkSchedule(t, uses, re)
		// Longest chain by dynamic programming over the hazard list.
		depth := make([]int, n)
		longest := 0
		hz := Hazards(uses)
		for j := 0; j < n; j++ {
			for _, h := range hz {
				if h.To == j && depth[h.From]+1 > depth[j] {
					depth[j] = depth[h.From] + 1
				}
			}
			longest = max(longest, depth[j])
		}
		if re.Barriers != longest {
			t.Fatalf("iteration %d: reordered %d barriers, longest chain needs %d", iter, re.Barriers, longest)
		}
		if re.Barriers > in.Barriers {
			t.Fatalf("iteration %d: reordering added barriers: %d > %d", iter, re.Barriers, in.Barriers)
		}
	}
}

func BenchmarkAnalyze1000(b *testing.B) {
	// 1000 dispatches over one arena, each reading its predecessor's output: the worst case.
	uses := make([][]Use, 1000)
	for i := range uses {
		uses[i] = []Use{r(1, uint64(i)*256, 256), r(2, uint64(i%7)*4096, 4096), w(1, uint64(i+1)*256, 256)}
	}
	for b.Loop() {
		Analyze(uses, true)
	}
}
