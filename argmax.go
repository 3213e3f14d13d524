package vkc

import (
	"fmt"

	"github.com/vkc-project/vkc/ir"
)

// NextTokenOutput is the name of the output Options.ArgmaxOutput adds.
const NextTokenOutput = "next_token"

// addArgmaxOutputs returns fns where every causal-language-model step function (inputs: an i32
// vector of tokens and an i32 scalar position; an output of floats [seq, vocab]) has one more
// output, next_token = argmax(logits, axis=-1) as i32[seq]: greedy generation then reads back
// one token per step instead of the logits row, and the argmax runs on the device. Other
// functions, and functions that already have an output of that name, are returned unchanged.
// The returned names say which functions gained the output.
func addArgmaxOutputs(m *ir.Model, fns []*ir.Function) ([]*ir.Function, []string, error) {
	out := make([]*ir.Function, len(fns))
	var changed []string
	for i, f := range fns {
		g, err := withArgmax(f)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: argmax output: %w", f.Name, err)
		}
		out[i] = g
		if g != f {
			changed = append(changed, f.Name)
		}
	}
	if len(changed) > 0 {
		chk := &ir.Model{Name: m.Name, Params: m.Params, State: m.State, Functions: out}
		if err := chk.Validate(); err != nil {
			return nil, nil, fmt.Errorf("argmax output: %w", err)
		}
	}
	return out, changed, nil
}

func withArgmax(f *ir.Function) (*ir.Function, error) {
	var seq int
	tokens, pos := false, false
	for _, in := range f.Inputs {
		t := in.Type()
		switch {
		case t.DType == ir.I32 && t.Shape.Rank() == 1 && !tokens:
			tokens, seq = true, t.Shape[0]
		case t.DType == ir.I32 && t.Shape.Rank() == 0 && !pos:
			pos = true
		default:
			return f, nil
		}
	}
	if !tokens || !pos || len(f.Inputs) != 2 {
		return f, nil
	}
	var logits *ir.Output
	li := -1
	for i := range f.Outputs {
		o := &f.Outputs[i]
		if o.Name == NextTokenOutput {
			return f, nil
		}
		t := o.Value.Type()
		if logits == nil && t.DType.IsFloat() && t.Shape.Rank() == 2 && t.Shape[0] == seq && t.Shape[1] > 1 {
			logits, li = o, i
		}
	}
	if logits == nil {
		return f, nil
	}
	attrs, outs, err := ir.Infer(ir.Argmax, ir.Attrs{"axis": -1}, []ir.Type{logits.Value.Type()})
	if err != nil {
		return nil, err
	}
	last := f.Nodes[len(f.Nodes)-1]
	n := &ir.Node{ID: last.ID + 1, Op: ir.Argmax, Args: []ir.Value{logits.Value}, Attrs: attrs, Outs: outs,
		Name: NextTokenOutput, Pos: f.Pos}
	g := *f
	g.Nodes = append(append([]*ir.Node(nil), f.Nodes...), n)
	g.Outputs = append(append([]ir.Output(nil), f.Outputs...), ir.Output{Name: NextTokenOutput, Value: n.V()})
	if f.Length != nil {
		// next_token has the logits' rows: a run at length n returns n tokens, and the function
		// at length n (the interpreter's) has the output too.
		l := f.Length.Derived(withArgmax)
		l.Outputs = append(l.Outputs, f.Length.Outputs[li])
		g.Length = l
	}
	return &g, nil
}
