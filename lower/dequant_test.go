package lower_test

import (
	"context"
	"errors"
	"math/rand"
	"strings"
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

// TestDequantFallback compiles block-quantized weights that no kernel template reads: each is
// dequantized at compile time (to f16), the plan holds only the dequantized forms and says so in
// a note, and the plan's results match the interpreter on the exact weights to f16's accuracy.
func TestDequantFallback(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	weights := map[string]*ir.Tensor{
		"embed": randomQuant(r, ir.T(ir.Q4_K, 6, 256)),
		"wa":    randomQuant(r, ir.T(ir.Q4_0, 5, 256)),
		"wb":    randomQuant(r, ir.T(ir.Q4_0, 3, 256)),
		"wc":    randomQuant(r, ir.T(ir.Q6_K, 7, 256)),
		"wd":    randomQuant(r, ir.T(ir.Q8_0, 4, 64)),
	}
	b := ir.NewBuilder("f")
	ids, _ := b.Input("ids", ir.T(ir.I32, 3))
	x, _ := b.Input("x", ir.T(ir.F32, 2, 64))
	h := b.MustOp(ir.Embedding, nil, b.Param("embed", weights["embed"].Type), ids)
	// a concatenation of two Q4_0 weights, folded at compile time as merge-linears makes it
	cat := b.MustOp(ir.Concat, ir.Attrs{"axis": 0}, b.Param("wa", weights["wa"].Type), b.Param("wb", weights["wb"].Type))
	y1 := b.MustOp(ir.Linear, nil, h, cat)
	y2 := b.MustOp(ir.Linear, nil, h, b.Param("wc", weights["wc"].Type))
	y3 := b.MustOp(ir.Matmul, ir.Attrs{"tb": true}, x, b.Param("wd", weights["wd"].Type))
	for name, v := range map[string]ir.Value{"y1": y1, "y2": y2, "y3": y3} {
		b.Output(name, v)
	}
	f := b.Function()
	m := newModel("q", weights, f)
	p, _, exe := compile(t, m)

	// The plan: f16 weights named after their sources, no blocks, one note per format.
	got := map[string]plan.DType{}
	for _, w := range p.Weights.Tensors {
		got[w.Name] = w.DType
		if w.DType.Quantized() {
			t.Errorf("weight %s is stored as %s, which no kernel reads", w.Name, w.DType)
		}
	}
	for n, dt := range map[string]plan.DType{"embed@f32": plan.F32, "wc@f16": plan.F16, "wd@f16": plan.F16} {
		if got[n] != dt {
			t.Errorf("weight %s: %v (weights %v)", n, got[n], got)
		}
	}
	notes := strings.Join(p.Record.Notes, "\n")
	for _, want := range []string{"1 q4_k weights", "1 q4_0 weights", "1 q6_k weights", "1 q8_0 weights", "stored as f16", "1 q4_k weights (864 B as blocks) stored as f32 (6.0 KiB)", "first for embedding"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}

	in := map[string]*ir.Tensor{"ids": ir.TensorFromFloat64s(ir.T(ir.I32, 3), []float64{5, 0, 3}), "x": random(r, ir.T(ir.F32, 2, 64))}
	want, err := interp.Eval(f, interp.Env{Inputs: in, Params: weights})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exe.Run(context.Background(), "f", map[string][]byte{"ids": in["ids"].Data, "x": in["x"].Data})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range f.Outputs {
		g := &ir.Tensor{Type: o.Value.Type(), Data: out[o.Name]}
		e := rowError(g, want[o.Value.Node][o.Value.Out])
		t.Logf("%s: row-relative error %.2g against the exact weights", o.Name, e)
		// f16 keeps 11 significant bits: each weight moves by at most 2⁻¹¹ relative.
		if e > 3e-3 {
			t.Errorf("%s: row-relative error %.3g > 3e-3", o.Name, e)
		}
	}
}

// blockReader is a template that reads q8_0 weights, for one shape only (TestNoFallback's):
// its Build fails on purpose, saying it was reached with the blocks.
var blockReader = &kernels.Template{
	Name:      "test-q8_0-linear",
	Quantized: []ir.DType{ir.Q8_0},
	Accepts: func(p *kernels.Problem, caps kernels.Caps) error {
		if p.Op != ir.Linear || len(p.Args) < 2 || p.Args[1].String() != "q8_0[5,96]" {
			return kernels.ErrOtherOp
		}
		return nil
	},
	Space: kernels.Space{},
	Build: func(p *kernels.Problem, c kernels.Config, caps kernels.Caps) (*kernels.Launch, error) {
		return nil, errors.New("reached with the blocks " + p.Args[1].String())
	},
}

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
	_, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "test"})
	if err == nil || !strings.Contains(err.Error(), "reached with the blocks q8_0[5,96]") {
		t.Fatalf("lowering: %v, want the q8_0 template's error", err)
	}
	// A q8_0 weight of another shape (the template refuses it) falls back.
	w2 := randomQuant(r, ir.T(ir.Q8_0, 4, 96))
	b = ir.NewBuilder("f")
	x, _ = b.Input("x", ir.T(ir.F32, 2, 96))
	b.Output("y", b.MustOp(ir.Linear, nil, x, b.Param("w", w2.Type)))
	m = newModel("q", map[string]*ir.Tensor{"w": w2}, b.Function())
	p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Record.Notes, "\n"), "1 q8_0 weights") {
		t.Errorf("no fallback note: %v", p.Record.Notes)
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
