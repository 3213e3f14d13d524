package vkc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
)

// Executable is what Generate needs of a loaded plan; *runtime.Executable provides it.
type Executable interface {
	// Plan is the plan the executable was loaded from.
	Plan() *plan.Plan
	// Run executes function fn with inputs in their plan layout (see TensorBytes) and returns
	// the outputs; persistent state (the KV caches) is kept between runs.
	Run(ctx context.Context, fn string, inputs map[string][]byte) (map[string][]byte, error)
}

// runInto is implemented by executables that can read back a subset of the outputs
// (*runtime.Executable); Generate then reads the argmax output alone.
type runInto interface {
	RunInto(ctx context.Context, fn string, inputs, outputs map[string][]byte) error
}

// Generation is the result of a greedy decode.
type Generation struct {
	Tokens []int32 // the generated tokens, in order (the prompt is not repeated)
	// Prompt is the time to run the prompt (prefill chunks and single-token steps) up to the
	// first generated token; Steps[i] is the time of the decode run that produced Tokens[i+1].
	Prompt time.Duration
	Steps  []time.Duration
	// PrefillFn and DecodeFn are the functions used ("" for PrefillFn when the prompt went
	// through DecodeFn one token at a time); Prefilled is the number of prompt tokens that went
	// through PrefillFn (the rest went through DecodeFn).
	PrefillFn, DecodeFn string
	Prefilled           int
	// HostArgmax says that the plan outputs logits only, so each next token was chosen on the
	// host from a read-back logits row; false when the plan's argmax output was used.
	HostArgmax bool
}

// PerToken is the median time of a decode step (0 if there was none).
func (g *Generation) PerToken() time.Duration {
	if len(g.Steps) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), g.Steps...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// stepFn is a function of a causal language model that processes seq tokens at a position:
// inputs tokens i32[seq] and pos i32[], and either logits [seq, vocab] (f32, f16 or bf16) or the
// argmax per row
// (i32[seq]; i32[] or i32[1] for the last row only).
type stepFn struct {
	f           *plan.Function
	seq         int
	tokens, pos string
	logits      string // float [seq, vocab] output (f32, f16 or bf16), or ""
	logitsType  plan.DType
	vocab       int
	next        string // i32 argmax output, or ""
	nextIndex   int    // its index in f.Outputs
	nextPerRow  bool   // next has one token per row (else: the last row's)
}

// stepFunction recognises f as a step function, or returns nil.
func stepFunction(f *plan.Function) *stepFn {
	if len(f.Inputs) != 2 {
		return nil
	}
	s := &stepFn{f: f}
	for _, v := range f.Inputs {
		switch {
		case v.DType == plan.I32 && len(v.Shape) == 1 && s.tokens == "":
			s.tokens, s.seq = v.Name, int(v.Shape[0])
		case v.DType == plan.I32 && len(v.Shape) == 0 && s.pos == "":
			s.pos = v.Name
		default:
			return nil
		}
	}
	if s.tokens == "" || s.pos == "" || s.seq < 1 {
		return nil
	}
	for i, v := range f.Outputs {
		switch {
		case v.DType == plan.I32 && len(v.Shape) == 1 && int(v.Shape[0]) == s.seq && s.next == "":
			s.next, s.nextIndex, s.nextPerRow = v.Name, i, true
		case v.DType == plan.I32 && (len(v.Shape) == 0 || len(v.Shape) == 1 && v.Shape[0] == 1) && s.next == "":
			s.next, s.nextIndex, s.nextPerRow = v.Name, i, s.seq == 1
		case (v.DType == plan.F32 || v.DType == plan.F16 || v.DType == plan.BF16) &&
			len(v.Shape) == 2 && int(v.Shape[0]) == s.seq && v.Shape[1] > 0 && s.logits == "":
			s.logits, s.logitsType, s.vocab = v.Name, v.DType, int(v.Shape[1])
		}
	}
	if s.next == "" && s.logits == "" {
		return nil
	}
	return s
}

// lmFunctions picks the decode function (a step function of one token, preferably named
// "decode") and the prefill function (the step function with the most tokens, preferably named
// "prefill"; nil if there is none with more than one).
func lmFunctions(p *plan.Plan) (prefill, decode *stepFn, err error) {
	for i := range p.Functions {
		s := stepFunction(&p.Functions[i])
		if s == nil {
			continue
		}
		if s.seq == 1 && (decode == nil || s.f.Name == "decode") {
			decode = s
		}
		if s.seq > 1 && (prefill == nil || s.f.Name == "prefill" ||
			prefill.f.Name != "prefill" && s.seq > prefill.seq) {
			prefill = s
		}
	}
	if decode == nil {
		var names []string
		for _, f := range p.Functions {
			names = append(names, fmt.Sprintf("%s(%s)", f.Name, signature(f.Inputs)))
		}
		return nil, nil, fmt.Errorf("plan for %q has no decode function (inputs tokens i32[1] and pos i32[], output logits [1, vocab] or an i32 argmax); it has %v", p.Model, names)
	}
	return prefill, decode, nil
}

// ContextLength is the number of positions the plan's KV caches hold: the smallest leading
// dimension of its state tensors of rank 2 or more, or 0 when it has none. Generation must stay
// below it (the cache rows past it do not exist).
func ContextLength(p *plan.Plan) int {
	n := 0
	for _, s := range p.State {
		if len(s.Shape) >= 2 && (n == 0 || int(s.Shape[0]) < n) {
			n = int(s.Shape[0])
		}
	}
	return n
}

// Generate runs a greedy decode: the prompt goes through the plan's prefill function in full
// chunks and through its decode function for the rest (so no chunk is ever padded, whatever the
// model's masking), then steps tokens are generated, each the argmax of the previous logits.
// The sequence starts at position 0, overwriting what the KV caches held. The argmax is taken on
// the device when the plan has an argmax output, otherwise on the host (Generation.HostArgmax).
//
//	g, err := vkc.Generate(ctx, exe, []int32{1, 2, 3}, 8)
//	fmt.Println(g.Tokens, g.PerToken())
func Generate(ctx context.Context, exe Executable, prompt []int32, steps int) (*Generation, error) {
	p := exe.Plan()
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if steps < 1 {
		return nil, fmt.Errorf("generate: %d steps; at least 1 is needed", steps)
	}
	prefill, decode, err := lmFunctions(p)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if n := ContextLength(p); n > 0 && len(prompt)+steps-1 > n {
		return nil, fmt.Errorf("generate: %d prompt tokens and %d steps need %d positions; the plan's cache holds %d",
			len(prompt), steps, len(prompt)+steps-1, n)
	}
	if vocab := max(decode.vocab, 0); vocab > 0 {
		for i, t := range prompt {
			if t < 0 || int(t) >= vocab {
				return nil, fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, vocab)
			}
		}
	}
	g := &Generation{DecodeFn: decode.f.Name, HostArgmax: decode.next == ""}
	start := time.Now()
	pos := 0
	var next int32
	for prefill != nil && len(prompt)-pos >= prefill.seq {
		g.PrefillFn = prefill.f.Name
		if next, err = step(ctx, exe, prefill, prompt[pos:pos+prefill.seq], pos); err != nil {
			return nil, err
		}
		pos += prefill.seq
	}
	g.Prefilled = pos
	for ; pos < len(prompt); pos++ {
		if next, err = step(ctx, exe, decode, prompt[pos:pos+1], pos); err != nil {
			return nil, err
		}
	}
	g.Prompt = time.Since(start)
	g.Tokens = append(g.Tokens, next)
	for len(g.Tokens) < steps {
		t0 := time.Now()
		if next, err = step(ctx, exe, decode, []int32{next}, pos); err != nil {
			return nil, err
		}
		g.Steps = append(g.Steps, time.Since(t0))
		g.Tokens = append(g.Tokens, next)
		pos++
	}
	return g, nil
}

// step runs s on tokens at pos and returns the greedy choice after the last token.
func step(ctx context.Context, exe Executable, s *stepFn, tokens []int32, pos int) (int32, error) {
	in := map[string][]byte{
		s.tokens: Int32Bytes(tokens...),
		s.pos:    Int32Bytes(int32(pos)),
	}
	var outs map[string][]byte
	var err error
	if ri, ok := exe.(runInto); ok && s.next != "" {
		// Read back the token alone, not the logits.
		v := s.f.Outputs[s.nextIndex]
		n, berr := v.Bytes()
		if berr != nil {
			return 0, berr
		}
		outs = map[string][]byte{s.next: make([]byte, n)}
		err = ri.RunInto(ctx, s.f.Name, in, outs)
	} else {
		outs, err = exe.Run(ctx, s.f.Name, in)
	}
	if err != nil {
		return 0, fmt.Errorf("generate: %s at position %d: %w", s.f.Name, pos, err)
	}
	if s.next != "" {
		ids := Int32s(outs[s.next])
		if len(ids) == 0 {
			return 0, fmt.Errorf("generate: %s returned no %s", s.f.Name, s.next)
		}
		if s.nextPerRow {
			return ids[len(tokens)-1], nil
		}
		return ids[len(ids)-1], nil
	}
	b := outs[s.logits]
	esize := 4
	if s.logitsType != plan.F32 {
		esize = 2
	}
	if len(b) != s.seq*s.vocab*esize {
		return 0, fmt.Errorf("generate: %s returned %d bytes of logits, want %d×%d %s", s.f.Name, len(b), s.seq, s.vocab, s.logitsType)
	}
	row := b[(len(tokens)-1)*s.vocab*esize : len(tokens)*s.vocab*esize]
	var logits []float32
	switch s.logitsType {
	case plan.F32:
		logits = Float32s(row)
	default:
		logits = make([]float32, s.vocab)
		for i := range logits {
			h := binary.LittleEndian.Uint16(row[2*i:])
			if s.logitsType == plan.F16 {
				logits[i] = ir.F16ToF32(h)
			} else {
				logits[i] = ir.BF16ToF32(h)
			}
		}
	}
	return int32(Argmax(logits)), nil
}

// Argmax is the index of the largest element (the first one on ties; NaN never wins), or -1 for
// an empty slice.
func Argmax(xs []float32) int {
	best := -1
	for i, x := range xs {
		if x != x {
			continue
		}
		if best < 0 || x > xs[best] {
			best = i
		}
	}
	if best < 0 && len(xs) > 0 {
		return 0
	}
	return best
}
