package lower_test

import (
	"context"
	"errors"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/plan"
)

func randomQuant(r *rand.Rand, t ir.Type) *ir.Tensor {
	f := t.DType.Format()
	return &ir.Tensor{Type: t, Data: f.RandomBlocks(r, t.Bytes()/f.BlockBytes)}
}

// TestQuantizedPlans compiles block-quantized weights that kernel templates read: the plan
// holds each as ggml's blocks byte for byte (a folded concatenation of two Q4_0 weights, as
// merge-linears makes it, as the blocks of both), no fallback note, and the plan's results
// match the interpreter on the exact weights to f32 accuracy (exact dequantization, f32
// arithmetic).
func TestQuantizedPlans(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	weights := map[string]*ir.Tensor{
		"embed": randomQuant(r, ir.T(ir.Q4_K, 6, 256)),
		"wa":    randomQuant(r, ir.T(ir.Q4_0, 5, 256)),
		"wb":    randomQuant(r, ir.T(ir.Q4_0, 3, 256)),
		"wc":    randomQuant(r, ir.T(ir.Q6_K, 7, 256)),
		"wd":    randomQuant(r, ir.T(ir.Q8_0, 3, 96)),
		"we":    randomQuant(r, ir.T(ir.Q5_1, 9, 256)),
	}
	b := ir.NewBuilder("f")
	ids, _ := b.Input("ids", ir.T(ir.I32, 3))
	x, _ := b.Input("x", ir.T(ir.F32, 2, 96))
	xs, _ := b.Input("xs", ir.T(ir.F32, 19, 256))
	h := b.MustOp(ir.Embedding, nil, b.Param("embed", weights["embed"].Type), ids)
	// a concatenation of two Q4_0 weights, folded at compile time as merge-linears makes it
	cat := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, b.Param("wa", weights["wa"].Type), b.Param("wb", weights["wb"].Type))
	y1 := b.MustOp(ir.Linear, nil, h, cat)
	y2 := b.MustOp(ir.Linear, nil, h, b.Param("wc", weights["wc"].Type))
	y3 := b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, x, b.Param("wd", weights["wd"].Type))
	y4 := b.MustOp(ir.Linear, nil, xs, b.Param("we", weights["we"].Type)) // 19 rows: the tiled kernel
	for name, v := range map[string]ir.Value{"y1": y1, "y2": y2, "y3": y3, "y4": y4} {
		b.Output(name, v)
	}
	f := b.Function()
	m := newModel("q", weights, f)
	p, _, exe := compile(t, m)

	got := map[string]plan.DType{}
	for _, w := range p.Weights.Tensors {
		got[w.Name] = w.DType
	}
	for _, n := range []string{"embed", "wc", "wd", "we"} {
		if want, _ := lower.PlanDType(weights[n].Type.DType); got[n] != want {
			t.Errorf("weight %s is stored as %v, want its blocks (%v); weights %v", n, got[n], want, got)
		}
	}
	nq := 0
	for n, dt := range got {
		if dt == plan.Q4_0 {
			nq++
		} else if !dt.Quantized() {
			t.Errorf("weight %s is stored as %s", n, dt)
		}
	}
	if nq == 0 {
		t.Errorf("the concatenation of wa and wb is not stored as q4_0 blocks: %v", got)
	}
	if notes := strings.Join(p.Record.Notes, "\n"); strings.Contains(notes, lower.DequantNotePrefix) {
		t.Errorf("fallback note for weights kernels read:\n%s", notes)
	}
	// vkc bench's bytes are the bytes stored: y4 reads x (19×256 f32), the 9×256 q5_1 weight as
	// its 1728 bytes of blocks, and writes 19×9 f32.
	wantBytes := float64(19*256*4 + 9*256/32*24 + 19*9*4)
	found := false
	for _, dp := range p.Functions[0].Dispatches {
		found = found || dp.Work.Bytes == wantBytes && strings.Contains(strings.Join(dp.Ops, ","), "linear")
	}
	if !found {
		var got []float64
		for _, dp := range p.Functions[0].Dispatches {
			got = append(got, dp.Work.Bytes)
		}
		t.Errorf("no linear dispatch records %g bytes (the q5_1 blocks, not their dequantized size): %v", wantBytes, got)
	}

	in := map[string]*ir.Tensor{"ids": ir.TensorFromFloat64s(ir.T(ir.I32, 3), []float64{5, 0, 3}),
		"x": random(r, ir.T(ir.F32, 2, 96)), "xs": random(r, ir.T(ir.F32, 19, 256))}
	want, err := interp.Eval(f, interp.Env{Inputs: in, Params: weights})
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{}
	for k, v := range in {
		raw[k] = v.Data
	}
	out, err := exe.Run(context.Background(), "f", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range f.Outputs {
		g := &ir.Tensor{Type: o.Value.Type(), Data: out[o.Name]}
		e := rowError(g, want[o.Value.Node][o.Value.Out])
		t.Logf("%s: row-relative error %.2g against the exact weights", o.Name, e)
		if e > 1e-5 {
			t.Errorf("%s: row-relative error %.3g > 1e-5", o.Name, e)
		}
	}
}

// TestQuantizedPlansNewFormats is TestQuantizedPlans for the formats with codebooks, packed
// sub-block scales and odd block sizes: an IQ4_XS embedding, an MXFP4 concatenation of weights of
// an odd number of 17-byte blocks (255 and 153 bytes, then whole words only in the binding), Q3_K
// and IQ4_NL decode products, and a Q2_K product of 19 rows (the tiled kernel). Each weight stays
// its blocks, and the plan matches the interpreter on the exact weights.
func TestQuantizedPlansNewFormats(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	weights := map[string]*ir.Tensor{
		"embed": randomQuant(r, ir.T(ir.IQ4_XS, 6, 256)),
		"wa":    randomQuant(r, ir.T(ir.MXFP4, 5, 96)),
		"wb":    randomQuant(r, ir.T(ir.MXFP4, 3, 96)),
		"wc":    randomQuant(r, ir.T(ir.Q3_K, 7, 256)),
		"wd":    randomQuant(r, ir.T(ir.IQ4_NL, 3, 96)),
		"we":    randomQuant(r, ir.T(ir.Q2_K, 9, 256)),
		"wf":    randomQuant(r, ir.T(ir.MXFP4, 3, 96)),
	}
	b := ir.NewBuilder("f")
	ids, _ := b.Input("ids", ir.T(ir.I32, 3))
	x, _ := b.Input("x", ir.T(ir.F32, 2, 96))
	xs, _ := b.Input("xs", ir.T(ir.F32, 19, 256))
	h := b.MustOp(ir.Embedding, nil, b.Param("embed", weights["embed"].Type), ids)
	cat := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, b.Param("wa", weights["wa"].Type), b.Param("wb", weights["wb"].Type))
	y1 := b.MustOp(ir.Linear, nil, x, cat)
	y2 := b.MustOp(ir.Linear, nil, h, b.Param("wc", weights["wc"].Type))
	y3 := b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, x, b.Param("wd", weights["wd"].Type))
	y4 := b.MustOp(ir.Linear, nil, xs, b.Param("we", weights["we"].Type))
	y5 := b.MustOp(ir.Linear, nil, x, b.Param("wf", weights["wf"].Type))
	for name, v := range map[string]ir.Value{"y1": y1, "y2": y2, "y3": y3, "y4": y4, "y5": y5} {
		b.Output(name, v)
	}
	f := b.Function()
	m := newModel("q", weights, f)
	p, _, exe := compile(t, m)
	got := map[string]plan.DType{}
	for _, w := range p.Weights.Tensors {
		got[w.Name] = w.DType
	}
	for _, n := range []string{"embed", "wc", "wd", "we", "wf"} {
		if want, _ := lower.PlanDType(weights[n].Type.DType); got[n] != want {
			t.Errorf("weight %s is stored as %v, want its blocks (%v); weights %v", n, got[n], want, got)
		}
	}
	for n, dt := range got {
		if !dt.Quantized() {
			t.Errorf("weight %s is stored as %s", n, dt)
		}
	}
	if notes := strings.Join(p.Record.Notes, "\n"); strings.Contains(notes, lower.DequantNotePrefix) {
		t.Errorf("fallback note for weights kernels read:\n%s", notes)
	}
	in := map[string]*ir.Tensor{"ids": ir.TensorFromFloat64s(ir.T(ir.I32, 3), []float64{5, 0, 3}),
		"x": random(r, ir.T(ir.F32, 2, 96)), "xs": random(r, ir.T(ir.F32, 19, 256))}
	want, err := interp.Eval(f, interp.Env{Inputs: in, Params: weights})
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{}
	for k, v := range in {
		raw[k] = v.Data
	}
	out, err := exe.Run(context.Background(), "f", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range f.Outputs {
		g := &ir.Tensor{Type: o.Value.Type(), Data: out[o.Name]}
		e := rowError(g, want[o.Value.Node][o.Value.Out])
		t.Logf("%s: row-relative error %.2g against the exact weights", o.Name, e)
		if e > 1e-5 {
			t.Errorf("%s: row-relative error %.3g > 1e-5", o.Name, e)
		}
	}
}

// TestDequantFallback compiles a block-quantized weight that no kernel template reads in its
// place — matmul's b without tb, whose blocks run along N, not along the product's K — so it is
// dequantized at compile time (to f16), the plan holds only the dequantized form and says so in
// a note, and the plan's results match the interpreter on the exact weights to f16's accuracy.
func TestDequantFallback(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	weights := map[string]*ir.Tensor{"wd": randomQuant(r, ir.T(ir.Q8_0, 5, 64))}
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 5))
	b.Output("y", b.MustOp(ir.Matmul, nil, x, b.Param("wd", weights["wd"].Type)))
	f := b.Function()
	m := newModel("q", weights, f)
	p, _, exe := compile(t, m)
	for _, w := range p.Weights.Tensors {
		if w.Name != "wd@f16" || w.DType != plan.F16 {
			t.Errorf("weight %s is stored as %s, want only wd@f16", w.Name, w.DType)
		}
	}
	notes := strings.Join(p.Record.Notes, "\n")
	if want := "compile-time dequantization: 1 q8_0 weights (340 B as blocks) stored as f16 (640 B): no kernel template reads q8_0 for it (first for matmul)"; !strings.Contains(notes, want) {
		t.Errorf("notes lack %q:\n%s", want, notes)
	}
	in := map[string]*ir.Tensor{"x": random(r, ir.T(ir.F32, 2, 5))}
	want, err := interp.Eval(f, interp.Env{Inputs: in, Params: weights})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exe.Run(context.Background(), "f", map[string][]byte{"x": in["x"].Data})
	if err != nil {
		t.Fatal(err)
	}
	g := &ir.Tensor{Type: f.Outputs[0].Value.Type(), Data: out["y"]}
	e := rowError(g, want[f.Outputs[0].Value.Node][0])
	// f16 keeps 11 significant bits: each weight moves by at most 2⁻¹¹ relative.
	if e > 3e-3 {
		t.Errorf("row-relative error %.3g > 3e-3", e)
	}
}

// blockReader is a template that reads q8_0 weights, for one shape only (TestNoFallback's):
// its Build records the operand it was given and fails, so lowering takes another template.
var blockReader = &kernels.Template{
	Name:      "test-q8_0-linear",
	Quantized: []ir.DType{ir.Q8_0},
	Accepts: func(p *kernels.Problem, caps kernels.Caps) error {
		if p.Op != ir.Linear || len(p.Args) < 2 || p.Args[1].String() != "q8_0[5,96]" {
			return kernels.ErrOtherOp
		}
		return nil
	},
	Space: kernels.NewSpace(kernels.Ints("x", 1)),
	Build: func(p *kernels.Problem, c kernels.Config, caps kernels.Caps) (*kernels.Launch, error) {
		blockReaderSaw.Store(p.Args[1].String())
		return nil, errors.New("test template: builds nothing")
	},
}

var blockReaderSaw atomic.Value

func init() { kernels.Register(blockReader) }

// TestNoFallback: when a template lists a block format in Template.Quantized, lowering gives
// it the problem with the blocks, and the fallback does not dequantize.
func TestNoFallback(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	w := randomQuant(r, ir.T(ir.Q8_0, 5, 96))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 96))
	b.Output("y", b.MustOp(ir.Linear, nil, x, b.Param("w", w.Type)))
	m := newModel("q", map[string]*ir.Tensor{"w": w}, b.Function())
	p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if saw, _ := blockReaderSaw.Load().(string); saw != "q8_0[5,96]" {
		t.Errorf("the q8_0 template was given %q, want the blocks q8_0[5,96]", saw)
	}
	if notes := strings.Join(p.Record.Notes, "\n"); strings.Contains(notes, lower.DequantNotePrefix) {
		t.Errorf("fallback note: %s", notes)
	}
}

// TestPlanDTypesMatchFormats: the plan's own table of block sizes agrees with ir/quant's.
func TestPlanDTypesMatchFormats(t *testing.T) {
	for _, d := range ir.QuantizedDTypes() {
		pd, err := lower.PlanDType(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		f := d.Format()
		if e, b := pd.BlockSize(); e != int64(f.BlockElems) || b != int64(f.BlockBytes) || pd.String() != f.Name || !pd.Quantized() {
			t.Errorf("%s: plan says %s with %d elements in %d bytes, quant %d in %d", d, pd, e, b, f.BlockElems, f.BlockBytes)
		}
	}
}
