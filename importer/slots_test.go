package importer_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
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
// without slots (score: every row's logits of the whole sequence), with caches of the batched
// function's dtype and f32 activations as the batched function's are: f32 caches
// (importer.F32), and the default f16 caches. The sequences sit in slots 2, 0 and 3; slot 1 is
// never written.
func TestBatchFunctionMeaning(t *testing.T) {
	dir := "../testdata/hf/tinyllama"
	for _, kv := range []string{"f32", "f16"} {
		t.Run(kv, func(t *testing.T) {
			single, err := importer.ImportHF(dir, importer.HFOptions{Precision: importer.Precision{Act: "f32", KV: kv}})
			if err != nil {
				t.Fatal(err)
			}
			opts := importer.HFOptions{Slots: 4}
			if kv == "f32" {
				opts.Precision = importer.F32
			}
			batched, err := importer.ImportHF(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if f := batched.Model.Function("batch"); f == nil || batched.Model.Function("decode") != nil || f.Length == nil {
				t.Fatalf("the import with slots has functions %v; want batch only, with a run-time length", functionNames(batched.Model))
			}
			decl := "k_cache.{i}: [slots, ctx, kv_heads, hd]"
			if kv != "f32" {
				decl = "k_cache.{i}: " + kv + "[slots, ctx, kv_heads, hd]"
			}
			if !strings.Contains(string(batched.YAML), decl) {
				t.Errorf("the caches are not %s:\n%s", decl, batched.YAML)
			}
			checkBatchMeaning(t, single.Model, batched.Model, 4)
		})
	}
	// --kv q8_0 needs a head dimension of whole blocks: tinyllama's 16 is refused, with slots
	// as without; so is --act f16 with slots.
	for _, c := range []struct {
		p    importer.Precision
		want string
	}{
		{importer.Precision{KV: "q8_0"}, "--kv q8_0: the head dimension 16 is not a whole number of 32-element blocks"},
		{importer.Precision{Act: "f16"}, "--act f16 with --parallel: the batched function's activations are f32"},
	} {
		if _, err := importer.ImportHF(dir, importer.HFOptions{Slots: 4, Precision: c.p}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v with slots: %v, want %q", c.p, err, c.want)
		}
	}
	batched, err := importer.ImportHF(dir, importer.HFOptions{Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkBadRows(t, batched.Model)
	if _, err := importer.ImportHF(dir, importer.HFOptions{Slots: -1}); err == nil {
		t.Error("-1 slots accepted")
	}
}

// TestBatchFunctionQuantizedKV: --parallel with a q8_0 and a q4_0 KV cache (qwen3-tiny, whose
// head dimension is whole blocks): the batched function's rows equal the single-sequence
// import's with the same cache and f32 activations, as TestBatchFunctionMeaning checks.
func TestBatchFunctionQuantizedKV(t *testing.T) {
	path := oracles.File(t, "llamacpp", "qwen3-tiny/qwen3-tiny-Q8_0.gguf")
	for _, kv := range []string{"q8_0", "q4_0"} {
		t.Run(kv, func(t *testing.T) {
			p := importer.Precision{Act: "f32", KV: kv}
			single, err := importer.ImportGGUF(path, importer.GGUFOptions{Precision: p, Ctx: 32})
			if err != nil {
				t.Fatal(err)
			}
			defer single.Model.Close()
			batched, err := importer.ImportGGUF(path, importer.GGUFOptions{Precision: importer.Precision{KV: kv}, Ctx: 32, Slots: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer batched.Model.Close()
			if decl := "k_cache.{i}: " + kv + "[slots, ctx, kv_heads, hd]"; !strings.Contains(string(batched.YAML), decl) {
				t.Errorf("the caches are not %s:\n%s", decl, batched.YAML)
			}
			checkBatchMeaning(t, single.Model, batched.Model, 4)
		})
	}
}

// checkBatchMeaning runs three sequences through batched's batch function (slots slots) in
// mixed runs and compares every row's logits with single's score of the sequence alone.
func checkBatchMeaning(t *testing.T, single, batched *ir.Model, slots int) {
	t.Helper()
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
	s := interp.NewSession(batched)
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
		ss := interp.NewSession(single)
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
		per := x.NumElements() / slots
		for i, v := range x.Float64s()[per : 2*per] {
			if v != 0 {
				t.Fatalf("%s: slot 1 element %d is %g", name, i, v)
			}
		}
	}
}

// checkBadRows: bad rows are errors naming the row: a slot or position outside the cache, two
// rows on one cell.
func checkBadRows(t *testing.T, batched *ir.Model) {
	t.Helper()
	for _, c := range []struct {
		pos, slot []float64
		want      string
	}{
		{[]float64{0}, []float64{4}, "slot 4 is outside 0..3"},
		{[]float64{128}, []float64{0}, "pos 128 is outside 0..127"},
		{[]float64{3, 3}, []float64{1, 1}, "rows 0 and 1 both write slot 1, position 3"},
	} {
		n := len(c.pos)
		_, err := interp.NewSession(batched).Run("batch", map[string]*ir.Tensor{
			"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, n), make([]float64, n)),
			"pos":    ir.TensorFromFloat64s(ir.T(ir.I32, n), c.pos),
			"slot":   ir.TensorFromFloat64s(ir.T(ir.I32, n), c.slot),
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("pos %v slot %v: %v, want %q", c.pos, c.slot, err, c.want)
		}
	}
}

func functionNames(m *ir.Model) string {
	var names []string
	for _, f := range m.Functions {
		names = append(names, f.Name)
	}
	return fmt.Sprint(names)
}
