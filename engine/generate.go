package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vkc-project/vkc/plan"
)

// Executable is what Generate needs of a loaded plan; *runtime.Executable provides it.
type Executable interface {
	// Plan is the plan the executable was loaded from.
	Plan() *plan.Plan
	// Run executes function fn with inputs in their plan layout (see Encode) and returns
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
	// through PrefillFn (the rest went through DecodeFn) in Chunks runs of it.
	PrefillFn, DecodeFn string
	Prefilled, Chunks   int
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

// Step is a function of a causal language model that processes Seq tokens at a position:
// inputs Tokens (i32[Seq]) and Pos (i32[]), and either Logits ([Seq, Vocab] of f32, f16 or
// bf16) or Next, the argmax per row (i32[Seq]; i32[] or i32[1] for the last row only), or both.
// A function with a run-time length (plan.Function.Length) over its tokens takes any MinSeq to
// Seq tokens and returns as many rows; a static one takes exactly Seq (MinSeq = Seq).
type Step struct {
	Function    *plan.Function
	Seq, MinSeq int
	Tokens, Pos string     // input names
	Logits      string     // float [Seq, Vocab] output, or ""
	LogitsType  plan.DType // its dtype
	Vocab       int        // 0 when there is no logits output
	Next        string     // i32 argmax output, or ""
	NextPerRow  bool       // Next has one token per row (else: the last row's)
	nextIndex   int        // Next's index in Function.Outputs
}

// StepFunction recognises f as a step function of a causal language model, or returns nil.
func StepFunction(f *plan.Function) *Step {
	if len(f.Inputs) != 2 {
		return nil
	}
	s := &Step{Function: f}
	for _, v := range f.Inputs {
		switch {
		case v.DType == plan.I32 && len(v.Shape) == 1 && s.Tokens == "":
			s.Tokens, s.Seq = v.Name, int(v.Shape[0])
		case v.DType == plan.I32 && len(v.Shape) == 0 && s.Pos == "":
			s.Pos = v.Name
		default:
			return nil
		}
	}
	if s.Tokens == "" || s.Pos == "" || s.Seq < 1 {
		return nil
	}
	s.MinSeq = s.Seq
	tokensBounded := false
	for _, v := range f.Inputs {
		if v.Name == s.Tokens && v.Bounded {
			tokensBounded = true
		}
	}
	if l := f.Length; l != nil && tokensBounded {
		if int(l.Max) != s.Seq {
			return nil // k tokens per unit of the length: not a prompt of n tokens
		}
		s.MinSeq = int(l.Min)
	} else if tokensBounded {
		return nil
	}
	for i, v := range f.Outputs {
		switch {
		case v.DType == plan.I32 && len(v.Shape) == 1 && int(v.Shape[0]) == s.Seq && s.Next == "":
			s.Next, s.nextIndex, s.NextPerRow = v.Name, i, true
		case v.DType == plan.I32 && (len(v.Shape) == 0 || len(v.Shape) == 1 && v.Shape[0] == 1) && s.Next == "":
			s.Next, s.nextIndex, s.NextPerRow = v.Name, i, s.Seq == 1
		case (v.DType == plan.F32 || v.DType == plan.F16 || v.DType == plan.BF16) &&
			len(v.Shape) == 2 && int(v.Shape[0]) == s.Seq && v.Shape[1] > 0 && s.Logits == "":
			s.Logits, s.LogitsType, s.Vocab = v.Name, v.DType, int(v.Shape[1])
		}
	}
	if s.Next == "" && s.Logits == "" {
		return nil
	}
	return s
}

// Bounded reports whether s takes a run-time number of tokens (MinSeq to Seq).
func (s *Step) Bounded() bool { return s.MinSeq < s.Seq }

// LM is what Generate uses of a causal language model's plan.
type LM struct {
	// Decode is the step function of one token, preferably named "decode" (or, when there is
	// none, a prefill with a run-time length from 1); Prefill the step function with the most
	// tokens, preferably named "prefill" (nil if there is none with more than one).
	Prefill, Decode *Step
	// Context is the number of positions the KV caches hold (ContextLength; 0: unbounded).
	Context int
}

// CausalLM finds the prefill and decode functions of p, or says why p is not a causal language
// model's plan (listing its functions' signatures).
func CausalLM(p *plan.Plan) (*LM, error) {
	lm := &LM{Context: ContextLength(p)}
	for i := range p.Functions {
		s := StepFunction(&p.Functions[i])
		if s == nil {
			continue
		}
		if s.Seq == 1 && (lm.Decode == nil || s.Function.Name == "decode") {
			lm.Decode = s
		}
		if s.Seq > 1 && (lm.Prefill == nil || s.Function.Name == "prefill" ||
			lm.Prefill.Function.Name != "prefill" && s.Seq > lm.Prefill.Seq) {
			lm.Prefill = s
		}
	}
	if lm.Decode == nil && lm.Prefill != nil && lm.Prefill.MinSeq == 1 {
		lm.Decode = lm.Prefill
	}
	if lm.Decode == nil {
		var names []string
		for _, f := range p.Functions {
			names = append(names, fmt.Sprintf("%s(%s)", f.Name, Signature(f.Inputs)))
		}
		return nil, fmt.Errorf("plan for %q has no decode function (inputs tokens i32[1] and pos i32[], output logits [1, vocab] or an i32 argmax); it has %v", p.Model, names)
	}
	return lm, nil
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

// Generate runs a greedy decode: the prompt goes through the plan's prefill function, then steps
// tokens are generated, each the argmax of the previous logits. A prefill with a run-time length
// takes the whole prompt in one run when it fits and in chunks of its capacity otherwise (the
// last chunk shorter); a prefill of static length takes full chunks and the decode function the
// rest (so no chunk is ever padded, whatever the model's masking).
// The sequence starts at position 0, overwriting what the KV caches held. The argmax is taken on
// the device when the plan has an argmax output, otherwise on the host (Generation.HostArgmax).
//
//	g, err := engine.Generate(ctx, m, []int32{1, 2, 3}, 8)
//	fmt.Println(g.Tokens, g.PerToken())
//
// exe is usually a *Model; any Executable works (tests pass the reference interpreter).
func Generate(ctx context.Context, exe Executable, prompt []int32, steps int) (*Generation, error) {
	p := exe.Plan()
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if steps < 1 {
		return nil, fmt.Errorf("generate: %d steps; at least 1 is needed", steps)
	}
	lm, err := CausalLM(p)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	prefill, decode := lm.Prefill, lm.Decode
	if n := lm.Context; n > 0 && len(prompt)+steps-1 > n {
		return nil, fmt.Errorf("generate: %d prompt tokens and %d steps need %d positions; the plan's cache holds %d",
			len(prompt), steps, len(prompt)+steps-1, n)
	}
	if vocab := max(decode.Vocab, 0); vocab > 0 {
		for i, t := range prompt {
			if t < 0 || int(t) >= vocab {
				return nil, fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, vocab)
			}
		}
	}
	g := &Generation{DecodeFn: decode.Function.Name, HostArgmax: decode.Next == ""}
	start := time.Now()
	pos := 0
	var next int32
	for prefill != nil && len(prompt)-pos >= prefill.MinSeq && (prefill.Bounded() || len(prompt)-pos >= prefill.Seq) {
		g.PrefillFn = prefill.Function.Name
		n := min(len(prompt)-pos, prefill.Seq)
		if next, err = step(ctx, exe, prefill, prompt[pos:pos+n], pos); err != nil {
			return nil, err
		}
		pos += n
		g.Chunks++
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

// Generate is Generate(ctx, m, prompt, steps).
func (m *Model) Generate(ctx context.Context, prompt []int32, steps int) (*Generation, error) {
	return Generate(ctx, m, prompt, steps)
}

// step runs s on tokens at pos and returns the greedy choice after the last token.
func step(ctx context.Context, exe Executable, s *Step, tokens []int32, pos int) (int32, error) {
	in := map[string][]byte{
		s.Tokens: Int32Bytes(tokens...),
		s.Pos:    Int32Bytes(int32(pos)),
	}
	var outs map[string][]byte
	var err error
	if ri, ok := exe.(runInto); ok && s.Next != "" {
		// Read back the token alone, not the logits.
		v := s.Function.Outputs[s.nextIndex]
		n, berr := v.Bytes()
		if berr != nil {
			return 0, berr
		}
		if v.Bounded {
			n = 4 * uint64(len(tokens)) // one token per row of the run
		}
		outs = map[string][]byte{s.Next: make([]byte, n)}
		err = ri.RunInto(ctx, s.Function.Name, in, outs)
	} else {
		outs, err = exe.Run(ctx, s.Function.Name, in)
	}
	if err != nil {
		return 0, fmt.Errorf("generate: %s at position %d: %w", s.Function.Name, pos, err)
	}
	if s.Next != "" {
		ids := Int32s(outs[s.Next])
		if len(ids) == 0 {
			return 0, fmt.Errorf("generate: %s returned no %s", s.Function.Name, s.Next)
		}
		if s.NextPerRow {
			return ids[len(tokens)-1], nil
		}
		return ids[len(ids)-1], nil
	}
	b := outs[s.Logits]
	esize := 4
	if s.LogitsType != plan.F32 {
		esize = 2
	}
	rows := s.Seq
	if s.Bounded() {
		rows = len(tokens) // a run at length n returns n rows
	}
	if len(b) != rows*s.Vocab*esize {
		return 0, fmt.Errorf("generate: %s returned %d bytes of logits, want %d×%d %s", s.Function.Name, len(b), rows, s.Vocab, s.LogitsType)
	}
	row := b[(len(tokens)-1)*s.Vocab*esize : len(tokens)*s.Vocab*esize]
	t := &Tensor{DType: s.LogitsType, Shape: []int64{int64(s.Vocab)}, Data: row}
	logits, err := t.Float32s()
	if err != nil {
		return 0, fmt.Errorf("generate: %s: %w", s.Function.Name, err)
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
