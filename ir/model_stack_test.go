package ir_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// TestParseStackedWeights: a parameter stacked from one tensor per index of its first axis (a
// mixture of experts stored one tensor per expert), f16 parts converted to the f32 parameter,
// and the errors: a stack without {j}, a missing part, a part of another shape.
func TestParseStackedWeights(t *testing.T) {
	dir := t.TempDir()
	parts := map[string]*ir.Tensor{}
	for l := range 2 {
		for j := range 3 {
			x := ir.NewTensor(ir.T(ir.F16, 2, 4))
			for i := range 8 {
				x.SetFloat64(i, float64(100*l+10*j+i))
			}
			parts[fmt.Sprintf("layers.%d.experts.%d.w", l, j)] = x
		}
	}
	for j := range 3 {
		parts[fmt.Sprintf("s%d", j)] = ir.NewTensor(ir.T(ir.F32, 4, 2))
	}
	if err := safetensors.Write(filepath.Join(dir, "w.safetensors"), parts); err != nil {
		t.Fatal(err)
	}
	src := func(name string) string {
		return `model: stack
dims: {layers: 2, e: 3}
weights:
  file: w.safetensors
  names:
    layers.{i}.exps: ` + name + `
params:
  layers.{i}.exps: [e, 2, 4]
functions:
  f:
    inputs: {x: "f32[4]"}
    outputs: [y]
    body:
      - y = linear(x, reshape(layers.1.exps, shape=[6, 4]))
`
	}
	m, err := ir.ParseModelBytes("t.yaml", []byte(src(`{stack: "layers.{i}.experts.{j}.w"}`)), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w := m.Weights["layers.1.exps"]
	if !w.Type.Equal(ir.T(ir.F32, 3, 2, 4)) {
		t.Fatalf("stacked weight %s", w.Type)
	}
	for j := range 3 {
		for i := range 8 {
			if got, want := w.Float64(8*j+i), float64(100+10*j+i); got != want {
				t.Fatalf("layers.1.exps[%d] element %d is %v, want %v", j, i, got, want)
			}
		}
	}
	for _, c := range []struct{ name, want string }{
		{`{stack: "layers.{i}.experts.w"}`, "want {stack: NAME} with {j} in NAME"},
		{`{stack: "layers.{i}.experts.{j}.v"}`, `has no tensor "layers.0.experts.0.v" (stacked entry 0 of 3)`},
		{`{stack: "s{j}"}`, "stacked entry s0 in w.safetensors is [4,2]; want [2,4]"},
		{`{stacks: "layers.{i}.experts.{j}.w"}`, "stacks"},
	} {
		_, err := ir.ParseModelBytes("t.yaml", []byte(src(c.name)), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
