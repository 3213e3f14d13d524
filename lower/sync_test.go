package lower_test

import (
	"context"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/rules"
	"github.com/vkc-project/vkc/runtime"
)

// TestSplitAttentionCombinedInPass compiles tinyllama with split-key attention whose last
// workgroup combines the ranges (combine=1: one dispatch, counters at Sync words kept past the
// state tensors) and checks prefill and decode steps against the interpreter, then the same
// after ResetState (the counters must be zero then too), against the two-step form's dispatch
// count.
func TestSplitAttentionCombinedInPass(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fns []*ir.Function
	for _, f := range m.Functions {
		g, _, err := rules.Optimize(context.Background(), m, f, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		fns = append(fns, g)
	}
	d := kerneltest.Device(t)
	compile := func(combine int) (*runtime.Executable, *lower.Report, uint64) {
		opts := options(d)
		opts.Choose = func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
			if p.Op == ir.Attention && kernels.AttentionSplit.Accepts(p, opts.Caps) == nil {
				return kernels.AttentionSplit, kernels.Config{"splits": 4, "block_k": 16, "wg": 64, "combine": combine}, nil
			}
			return lower.StaticChoice(p, opts.Caps, lower.Lavapipe)
		}
		p, rep, err := lower.Lower(m, fns, opts)
		if err != nil {
			t.Fatal(err)
		}
		exe, err := d.Load(p, runtime.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { exe.Close() })
		var tensors uint64
		for _, st := range m.State {
			tensors += uint64(st.Type.Bytes())
		}
		if combine == 1 && p.StateSize <= tensors {
			t.Errorf("state region of %d bytes holds no sync words past its tensors (%d bytes)", p.StateSize, tensors)
		}
		return exe, rep, p.StateSize
	}
	exe, rep, _ := compile(1)
	_, rep0, _ := compile(0)
	for i, f := range rep.Functions {
		if f.Name == "decode" && f.Dispatches >= rep0.Functions[i].Dispatches {
			t.Errorf("decode: %d dispatches with the combine in the pass, %d with a combining step", f.Dispatches, rep0.Functions[i].Dispatches)
		}
	}
	for round := 0; round < 2; round++ {
		s := interp.NewSession(m)
		pos := 0
		for _, f := range m.Functions {
			steps := 1
			if f.Name == "decode" {
				steps = 4
			}
			for k := 0; k < steps; k++ {
				in := exampleInputs(m, f, pos, uint64(29+k+10*round))
				got, want := runPair(t, exe, s, f, in)
				for _, o := range f.Outputs {
					if !o.Value.Type().DType.IsFloat() {
						continue
					}
					if e := rowError(got[o.Name], want[o.Name]); e > rowTol {
						t.Errorf("round %d: %s step %d: output %s: row-relative error %.3g > %g", round, f.Name, k, o.Name, e, rowTol)
					}
				}
				for _, n := range f.Inputs {
					if n.Type().DType.IsInt() && n.Type().Shape.Rank() > 0 {
						pos += n.Type().Shape[0]
					}
				}
			}
		}
		if err := exe.ResetState(); err != nil {
			t.Fatal(err)
		}
	}
}
