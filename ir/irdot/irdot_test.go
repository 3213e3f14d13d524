package irdot

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

func TestTinyLlamaClusters(t *testing.T) {
	m, err := ir.ParseModelWith("../../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Function("decode")
	var b bytes.Buffer
	if err := Write(&b, m, f, Options{}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"digraph", "subgraph cluster_", `label="repeat i=0"`, `label="repeat i=1"`,
		"q = rope", "f32[1,4,16]", "param layers.1.wq", "output logits", "state k_cache.0 ←", "const 1",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("DOT lacks %q", want)
		}
	}
	// Every parameter of layer 1 is drawn inside layer 1's cluster.
	groups := assignGroups(f, DefaultGroup)
	for _, n := range f.Nodes {
		if n.Op == ir.Param && strings.HasPrefix(n.Name, "layers.1.") && groups[n] != "i=1" {
			t.Errorf("%s is in cluster %q", n.Name, groups[n])
		}
		if (n.Op == ir.Input || n.Name == "embed" || n.Name == "x") && groups[n] != "" {
			t.Errorf("input %s is in cluster %q", n.Name, groups[n])
		}
	}
	if path, err := exec.LookPath("dot"); err == nil {
		cmd := exec.Command(path, "-Tsvg")
		cmd.Stdin = strings.NewReader(s)
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("<svg")) {
			t.Errorf("graphviz rejects the DOT: %v\n%s", err, out[:min(len(out), 500)])
		}
	}
}

func TestNoteAndHideConsts(t *testing.T) {
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2))
	y := b.MustOp(ir.Mul, nil, x, b.Scalar(ir.F32, 0.5))
	b.Output("y", y)
	f := b.Function()
	s := Function(nil, f, Options{HideConsts: true, Note: func(n *ir.Node) string {
		if n.Op == ir.Mul {
			return "kernel: scale"
		}
		return ""
	}}).String()
	if strings.Contains(s, "const") || !strings.Contains(s, "kernel: scale") {
		t.Errorf("DOT:\n%s", s)
	}
}

// TestAttentionLayouts: an attention node names the layout of each operand, even where its
// attribute list is cut to MaxAttrLen.
func TestAttentionLayouts(t *testing.T) {
	b := ir.NewBuilder("f")
	q, _ := b.Input("q", ir.T(ir.F32, 3, 4, 8))
	k, _ := b.Input("k", ir.T(ir.F32, 2, 8, 5))
	v, _ := b.Input("v", ir.T(ir.F32, 2, 5, 8))
	a := b.MustOp(ir.Attention, ir.Attrs{"causal": true, "scale": 0.125, "k_layout": "hds", "v_layout": "hsd"}, q, k, v)
	b.Output("a", a)
	s := Function(nil, b.Function(), Options{MaxAttrLen: 10}).String()
	if !strings.Contains(s, "layouts: q shd, k hds, v hsd") {
		t.Errorf("DOT lacks the operand layouts:\n%s", s)
	}
}
