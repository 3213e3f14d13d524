package rules

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// layerOf assigns each node of f to a layer: the highest layer index among the parameters and
// state it depends on ("layers.7.wq", "k_cache.7"), -1 for none. The residual add that ends layer
// i's FFN and the norm that starts layer i+1 fused into one add_rmsnorm count in layer i+1.
func layerOf(f *ir.Function) map[*ir.Node]int {
	re := regexp.MustCompile(`^(?:layers\.|[kv]_cache\.)(\d+)`)
	layer := map[*ir.Node]int{}
	for _, n := range f.Nodes { // topological order
		l := -1
		if m := re.FindStringSubmatch(n.Name); m != nil && (n.Op == ir.Param || n.Op == ir.State) {
			l, _ = strconv.Atoi(m[1])
		}
		for _, a := range n.Args {
			l = max(l, layer[a.Node])
		}
		layer[n] = l
	}
	return layer
}

// layerOps returns, per layer, the sorted ops (with the rule that introduced each) of f's
// computing nodes in that layer.
func layerOps(f *ir.Function, layers int) []string {
	layer := layerOf(f)
	ops := make([][]string, layers)
	for _, n := range f.Nodes {
		if l := layer[n]; l >= 0 && n.Op.Info().Kind != ir.KindSource {
			ops[l] = append(ops[l], n.Op.String()+"/"+n.Rule)
		}
	}
	out := make([]string, layers)
	for i, o := range ops {
		slices.Sort(o)
		out[i] = strings.Join(o, " ")
	}
	return out
}

// TestExtractEveryLayer: extraction of the whole function chooses the same fusions in every layer
// of tinyllama and of the 30-layer SmolLM2-135M, decode and prefill, including the fusion that
// crosses a layer boundary. With the rule set as it is, every norm goes into the linears it
// feeds (the static cost favours rmsnorm_linear over add_rmsnorm, which writes the normalised
// value only for the linear to read it back); with rmsnorm-linear disabled, every residual add
// and the norm after it become one add_rmsnorm, across layer boundaries too.
// lastRowNorms is the rmsnorms a function keeps with rmsnorm-linear disabled: the embedding's,
// and the final norm too when the function returns its last row's logits only (one row of a
// function with a run-time length: the norm reads a slice of the residual sum).
func lastRowNorms(f *ir.Function) int {
	if f.Length != nil && f.Length.Max > 1 && f.Outputs[0].Value.Type().Shape[0] == 1 {
		return 2
	}
	return 1
}

func TestExtractEveryLayer(t *testing.T) {
	type model struct {
		name   string
		layers int
		m      func(t *testing.T) *ir.Model
	}
	models := []model{{"tinyllama", 2, func(t *testing.T) *ir.Model {
		m, err := ir.ParseModelWith("../examples/tinyllama/model.yaml", ir.ParseOptions{SkipWeights: true})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}}
	if !testing.Short() {
		models = append(models, model{"smollm2-135m", 30, func(t *testing.T) *ir.Model { return smolLM2(t, 30) }})
	}
	for _, md := range models {
		m := md.m(t)
		L := md.layers
		for _, f := range m.Functions {
			for _, disable := range [][]string{nil, {"rmsnorm-linear"}} {
				t.Run(fmt.Sprintf("%s/%s/disable=%v", md.name, f.Name, disable), func(t *testing.T) {
					out, rep, err := Optimize(context.Background(), m, f, Options{Disable: disable})
					if err != nil {
						t.Fatal(err)
					}
					ops := map[ir.Op]int{}
					for _, n := range out.Nodes {
						ops[n.Op]++
					}
					per := layerOps(out, L)
					for i := 2; i < L-1; i++ {
						if per[i] != per[1] {
							t.Errorf("layer %d extracts to\n  %s\nlayer 1 to\n  %s", i, per[i], per[1])
						}
					}
					if disable == nil {
						if ops[ir.RMSNorm] != 0 || ops[ir.AddRMSNorm] != 0 || ops[ir.RMSNormLinear] < 2*L+1 {
							t.Errorf("%d rmsnorm, %d add_rmsnorm, %d rmsnorm_linear; want 0, 0, ≥ %d\n%s", ops[ir.RMSNorm], ops[ir.AddRMSNorm], ops[ir.RMSNormLinear], 2*L+1, rep)
						}
						for i, p := range per {
							if strings.Count(p, "rmsnorm_linear/") < 2 {
								t.Errorf("layer %d has fewer than 2 rmsnorm_linear: %s", i, p)
							}
						}
					} else if want := lastRowNorms(f); ops[ir.RMSNorm] != want || ops[ir.AddRMSNorm] != 2*L+1-want {
						// Only the first norm, of the embedding, has no add before it; and the
						// final one of a prefill that returns its last row normalises a slice
						// of the residual sum (the pick of the row comes between them).
						t.Errorf("%d rmsnorm, %d add_rmsnorm; want %d, %d\n%s", ops[ir.RMSNorm], ops[ir.AddRMSNorm], want, 2*L+1-want, rep)
					}
				})
			}
		}
	}
}
