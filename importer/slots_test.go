package importer_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// batchRow is one row of a batch run: a sequence's token at a position.
type batchRow struct {
	seq, pos int
}

// TestBatchFunctionMeaning defines the batched function by the single-sequence one, through the
// interpreter: tinyllama imported with 4 slots runs three sequences through batch in runs that
// mix prefill chunks (rows of one slot at consecutive positions) and decode rows of several
// slots, and every row's logits equal those of the same sequence run alone through the import
// without slots (score: every row's logits of the whole sequence), with f32 caches as the batched
// function's are (importer.F32). The sequences sit in slots 2, 0 and 3; slot 1 is never written.
func TestBatchFunctionMeaning(t *testing.T) {
	dir := "../testdata/hf/tinyllama"
	single, err := importer.ImportHF(dir, importer.HFOptions{Precision: importer.F32})
	if err != nil {
		t.Fatal(err)
	}
	batched, err := importer.ImportHF(dir, importer.HFOptions{Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	if f := batched.Model.Function("batch"); f == nil || batched.Model.Function("decode") != nil || f.Length == nil {
		t.Fatalf("the import with slots has functions %v; want batch only, with a run-time length", functionNames(batched.Model))
	}
	if !strings.Contains(string(batched.YAML), "k_cache.{i}: [slots, ctx, kv_heads, hd]") {
		t.Errorf("the caches have no slot dimension:\n%s", batched.YAML)
	}
	seqs := [][]int32{
		{37, 235, 140, 72, 255, 137, 203, 133, 79},
		{5, 200, 17, 99, 3, 250},
		{1, 2, 3, 4},
	}
	slotOf := []int{2, 0, 3}
	runs := [][]batchRow{
		{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}},         // a prefill chunk of sequence 0
		{{0, 5}, {0, 6}, {1, 0}, {1, 1}, {1, 2}, {1, 3}}, // its rest, and sequence 1's first chunk
		{{0, 7}, {1, 4}, {2, 0}},                         // decode rows and a one-token chunk
		{{2, 1}, {2, 2}, {2, 3}, {0, 8}, {1, 5}},         // a chunk before decode rows
	}
	s := interp.NewSession(batched.Model)
	got := map[[2]int][]float64{}
	for ri, run := range runs {
		var tokens, pos, slot []float64
		for _, r := range run {
			tokens = append(tokens, float64(seqs[r.seq][r.pos]))
			pos = append(pos, float64(r.pos))
			slot = append(slot, float64(slotOf[r.seq]))
		}
		n := len(run)
		out, err := s.Run("batch", map[string]*ir.Tensor{
			"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, n), tokens),
			"pos":    ir.TensorFromFloat64s(ir.T(ir.I32, n), pos),
			"slot":   ir.TensorFromFloat64s(ir.T(ir.I32, n), slot),
		})
		if err != nil {
			t.Fatalf("run %d: %v", ri, err)
		}
		l := out["logits"].Float64s()
		vocab := len(l) / n
		for i, r := range run {
			got[[2]int{r.seq, r.pos}] = l[i*vocab : (i+1)*vocab]
		}
	}
	for si, sq := range seqs {
		ss := interp.NewSession(single.Model)
		ids := make([]float64, len(sq))
		for i, id := range sq {
			ids[i] = float64(id)
		}
		out, err := ss.Run("score", map[string]*ir.Tensor{
			"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, len(sq)), ids),
			"pos":    ir.TensorFromFloat64s(ir.T(ir.I32), []float64{0}),
		})
		if err != nil {
			t.Fatal(err)
		}
		want := out["logits"].Float64s()
		vocab := len(want) / len(sq)
		for p := range sq {
			g := got[[2]int{si, p}]
			worst := 0.0
			for j := range g {
				worst = math.Max(worst, math.Abs(g[j]-want[p*vocab+j]))
			}
			if worst > 1e-5 {
				t.Errorf("sequence %d, position %d: the batched logits differ from the sequence's own by %g", si, p, worst)
			}
		}
	}
	// Slot 1 was never written.
	for _, name := range []string{"k_cache.0", "v_cache.0", "k_cache.1", "v_cache.1"} {
		x := s.State(name)
		if x == nil {
			t.Fatalf("no state %s", name)
		}
		per := x.NumElements() / 4
		for i, v := range x.Float64s()[per : 2*per] {
			if v != 0 {
				t.Fatalf("%s: slot 1 element %d is %g", name, i, v)
			}
		}
	}
	// Bad rows are errors naming the row: a slot or position outside the cache, two rows on one
	// cell.
	for _, c := range []struct {
		pos, slot []float64
		want      string
	}{
		{[]float64{0}, []float64{4}, "slot 4 is outside 0..3"},
		{[]float64{128}, []float64{0}, "pos 128 is outside 0..127"},
		{[]float64{3, 3}, []float64{1, 1}, "rows 0 and 1 both write slot 1, position 3"},
	} {
		n := len(c.pos)
		_, err := interp.NewSession(batched.Model).Run("batch", map[string]*ir.Tensor{
			"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, n), make([]float64, n)),
			"pos":    ir.TensorFromFloat64s(ir.T(ir.I32, n), c.pos),
			"slot":   ir.TensorFromFloat64s(ir.T(ir.I32, n), c.slot),
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pos %v slot %v: %v, want %q", c.pos, c.slot, err, c.want)
		}
	}
	if _, err := importer.ImportHF(dir, importer.HFOptions{Slots: -1}); err == nil {
		t.Error("-1 slots accepted")
	}
}

func functionNames(m *ir.Model) string {
	var names []string
	for _, f := range m.Functions {
		names = append(names, f.Name)
	}
	return fmt.Sprint(names)
}
