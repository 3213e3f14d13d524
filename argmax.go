package vkc

import (
	"fmt"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
)

// The outputs Compile adds to a causal language model's step functions, so that generation
// reads back a token or a few candidates per step instead of a logits row (engine.StepFunction
// finds them by these names).
const (
	// NextTokenOutput (Options.ArgmaxOutput) is argmax(logits, axis=-1), i32[seq].
	NextTokenOutput = "next_token"
	// TopIDsOutput and TopLogitsOutput (Options.TopK) are argtopk(logits, k), i32[seq, k], and
	// the logits they index, take_along_axis(logits, top_ids), [seq, k].
	TopIDsOutput    = engine.TopIDsOutput
	TopLogitsOutput = engine.TopLogitsOutput
)

// DefaultTopK is the candidates vkc compile ranks on the device for sampling (--top-k): more
// than the common top-k defaults (40 in llama.cpp, 50 in transformers), so sampling with them
// reads back only these.
const DefaultTopK = 64

// addLMOutputs returns fns where every causal-language-model step function (inputs: an i32
// vector of tokens and an i32 scalar position, or a batched step's tokens, positions and slots,
// three i32 vectors; an output of floats [seq, vocab], or [1, vocab] for the last row only) has the
// outputs next_token (argmax) and, with topK > 0, top_ids and top_logits (the min(topK, vocab)
// largest logits of each row, ranked on the device). Other functions, and functions that already
// have such outputs, are returned unchanged. The returned names say which functions gained them.
func addLMOutputs(m *ir.Model, fns []*ir.Function, argmax bool, topK int) ([]*ir.Function, []string, error) {
	out := make([]*ir.Function, len(fns))
	var changed []string
	for i, f := range fns {
		g, err := withLMOutputs(f, argmax, topK)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s: generation outputs: %w", f.Name, err)
		}
		out[i] = g
		if g != f {
			changed = append(changed, f.Name)
		}
	}
	if len(changed) > 0 {
		chk := &ir.Model{Name: m.Name, Params: m.Params, State: m.State, Functions: out}
		if err := chk.Validate(); err != nil {
			return nil, nil, fmt.Errorf("generation outputs: %w", err)
		}
	}
	return out, changed, nil
}

func withLMOutputs(f *ir.Function, argmax bool, topK int) (*ir.Function, error) {
	var seq int
	tokens, pos, rows := false, false, 0
	for _, in := range f.Inputs {
		t := in.Type()
		switch {
		case t.DType == ir.I32 && t.Shape.Rank() == 1 && !tokens:
			tokens, seq = true, t.Shape[0]
		case t.DType == ir.I32 && t.Shape.Rank() == 0 && !pos:
			pos = true
		case t.DType == ir.I32 && t.Shape.Rank() == 1 && tokens && t.Shape[0] == seq:
			rows++ // a batched step's per-row position and slot (importer --parallel)
		default:
			return f, nil
		}
	}
	if !(tokens && pos && len(f.Inputs) == 2) && !(tokens && rows == 2 && len(f.Inputs) == 3) {
		return f, nil
	}
	var logits *ir.Output
	li := -1
	for i := range f.Outputs {
		o := &f.Outputs[i]
		switch o.Name {
		case NextTokenOutput, TopIDsOutput, TopLogitsOutput:
			return f, nil
		}
		t := o.Value.Type()
		// Every row's logits, or the last row's (a generation prefill: [1, vocab]).
		if logits == nil && t.DType.IsFloat() && t.Shape.Rank() == 2 && (t.Shape[0] == seq || t.Shape[0] == 1) && t.Shape[1] > 1 {
			logits, li = o, i
		}
	}
	if logits == nil {
		return f, nil
	}
	g := *f
	g.Nodes = append([]*ir.Node(nil), f.Nodes...)
	g.Outputs = append([]ir.Output(nil), f.Outputs...)
	add := func(name string, op ir.Op, attrs ir.Attrs, args ...ir.Value) (ir.Value, error) {
		types := make([]ir.Type, len(args))
		for i, a := range args {
			types[i] = a.Type()
		}
		at, outs, err := ir.Infer(op, attrs, types)
		if err != nil {
			return ir.Value{}, err
		}
		n := &ir.Node{ID: g.Nodes[len(g.Nodes)-1].ID + 1, Op: op, Args: args, Attrs: at, Outs: outs, Name: name, Pos: f.Pos}
		g.Nodes = append(g.Nodes, n)
		g.Outputs = append(g.Outputs, ir.Output{Name: name, Value: n.V()})
		return n.V(), nil
	}
	added := 0
	if argmax {
		if _, err := add(NextTokenOutput, ir.Argmax, ir.Attrs{"axis": -1}, logits.Value); err != nil {
			return nil, err
		}
		added++
	}
	if topK > 0 {
		k := min(topK, logits.Value.Type().Shape[1])
		ids, err := add(TopIDsOutput, ir.ArgTopK, ir.Attrs{"k": k}, logits.Value)
		if err != nil {
			return nil, err
		}
		if _, err := add(TopLogitsOutput, ir.TakeAlongAxis, nil, logits.Value, ids); err != nil {
			return nil, err
		}
		added += 2
	}
	if added == 0 {
		return f, nil
	}
	if f.Length != nil {
		// The new outputs have the logits' rows: a run at length n returns n rows of each, and
		// the function at length n (the interpreter's) has them too.
		l := f.Length.Derived(func(h *ir.Function) (*ir.Function, error) { return withLMOutputs(h, argmax, topK) })
		for range added {
			l.Outputs = append(l.Outputs, f.Length.Outputs[li])
		}
		g.Length = l
	}
	return &g, nil
}
