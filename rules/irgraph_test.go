package rules

import (
	"testing"

	"github.com/vkc-project/vkc/egraph"
	"github.com/vkc-project/vkc/ir"
)

// TestAnalysisFoldsSmallConstants: arithmetic on small constants becomes a constant node in the
// same class (kv_len offsets, scale products), while a value that depends on an input does not.
func TestAnalysisFoldsSmallConstants(t *testing.T) {
	b := ir.NewBuilder("f")
	pos, _ := b.Input("pos", ir.T(ir.I32))
	seq := b.Scalar(ir.I32, 16)
	sum := b.MustOp(ir.Add, nil, seq, b.MustOp(ir.Mul, nil, b.Scalar(ir.I32, 3), b.Scalar(ir.I32, -2)))
	half := b.MustOp(ir.Div, nil, b.Scalar(ir.F32, 1), b.Scalar(ir.F32, 8))
	dyn := b.MustOp(ir.Add, nil, pos, seq)
	a := newAdapter()
	for i, v := range []ir.Value{sum, half, dyn} {
		_ = b.Output(string(rune('a'+i)), v)
	}
	vals, err := a.addFunction(b.Function())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.g.Rebuild(); err != nil {
		t.Fatal(err)
	}
	hasConst := func(id egraph.Id) bool {
		for _, n := range a.g.Nodes(id) {
			if n.Op == egraph.Op(ir.Const) {
				return true
			}
		}
		return false
	}
	if v := info(a.g, vals[sum]).Value; v == nil || v.Float64(0) != 10 || !hasConst(vals[sum]) {
		t.Errorf("16 + 3·(-2) folded to %v", v)
	}
	if v := info(a.g, vals[half]).Value; v == nil || v.Float64(0) != 0.125 {
		t.Errorf("1/8 folded to %v", v)
	}
	if d := info(a.g, vals[dyn]); d.Value != nil || hasConst(vals[dyn]) || d.Static {
		t.Errorf("pos + 16 was folded or marked static: %+v", d)
	}
}

// TestCanonLiteral: rule literals are spelled as the e-graph holds attributes.
func TestCanonLiteral(t *testing.T) {
	for _, c := range []struct{ op, attr, lit, want string }{
		{"rmsnorm", "eps", "1e-5", "1e-05"},
		{"transpose", "perm", "[1, 0, 2]", "[1,0,2]"},
		{"matmul", "tb", "true", "true"},
		{"const", "value", "0.50", "0.5"},
		{"softmax", "axis", "-1", "-1"},
	} {
		got, err := canonLiteral(c.op, c.attr, c.lit)
		if err != nil || got != c.want {
			t.Errorf("%s[%s=%s] = %q, %v; want %q", c.op, c.attr, c.lit, got, err, c.want)
		}
	}
	if _, err := canonLiteral("matmul", "tb", "maybe"); err == nil {
		t.Error("tb=maybe accepted")
	}
}
