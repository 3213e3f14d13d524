package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/tokenizer"
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
// (*runtime.Executable); generation then reads back only what a step needs.
type runInto interface {
	RunInto(ctx context.Context, fn string, inputs, outputs map[string][]byte) error
}

// Generation is the result of a generation.
type Generation struct {
	// Tokens are the generated tokens, in order (the prompt is not repeated, the token that
	// stopped the generation is not included); Text is their text (GenerateText and
	// Model.Generate only), as it was emitted.
	Tokens []int32
	Text   string
	// PromptTokens is the number of prompt tokens (after the chat template and special tokens).
	PromptTokens int
	// Stopped says why generation ended: StopToken, StopString, StopMaxTokens, StopContext or
	// StopCallback.
	Stopped string
	// Prompt is the time to run the prompt (prefill chunks and single-token steps) up to the
	// first generated token; Steps[i] is the time of the decode run that produced Tokens[i+1].
	Prompt time.Duration
	Steps  []time.Duration
	// Reused is the number of prompt tokens whose keys and values were in the KV cache already
	// (a Session's earlier turns, a shared prefix): they were not run again.
	Reused int
	// PrefillFn and DecodeFn are the functions used ("" for PrefillFn when the prompt went
	// through DecodeFn one token at a time); Prefilled is the number of prompt tokens that went
	// through PrefillFn (the rest, past Reused, went through DecodeFn) in Chunks runs of it.
	PrefillFn, DecodeFn string
	Prefilled, Chunks   int
	// HostArgmax says that a greedy token was chosen on the host from a read-back logits row
	// (the plan outputs logits only); false when the plan's argmax output was used.
	HostArgmax bool
	// Candidates is the number of (index, logit) pairs the device ranked and a sampling step
	// read back (0 when no step did); RowSteps counts the steps that read the whole logits row
	// instead (no candidates in the plan, TopK 0 or beyond them, or a penalty that reached past
	// them: see Sampling).
	Candidates, RowSteps int
}

// Why a generation stopped (Generation.Stopped).
const (
	StopToken     = "end token"    // one of GenerateOptions.StopIDs (the end-of-sequence token)
	StopString    = "stop string"  // one of GenerateOptions.Stop appeared in the text
	StopMaxTokens = "max tokens"   // GenerateOptions.MaxTokens were generated
	StopContext   = "context full" // the KV caches have no position left for the next token
	StopCallback  = "callback"     // the emit function returned ErrStop
)

// ErrStop, returned by an emit function, ends the generation without an error (Generation.Stopped
// is StopCallback).
var ErrStop = errors.New("stop generating")

// GenerateOptions configure GenerateIDs, GenerateText and Model.Generate. The zero value
// generates greedily until an end token or a full context.
type GenerateOptions struct {
	// MaxTokens bounds the tokens generated; 0 means until a stop condition or a full context.
	MaxTokens int
	// Sampling chooses each token (the zero value is greedy); see Sampling for what runs where.
	Sampling Sampling
	// StopIDs are tokens that end the generation (not emitted). nil means none for GenerateIDs,
	// and for GenerateText the tokenizer's EOS and, with Chat, the template's end-of-turn token.
	StopIDs []int32

	// The text forms only (GenerateText, Model.Generate):

	// Stop are strings that end the generation: the text up to the first one is emitted, the
	// string itself is not.
	Stop []string
	// Chat renders the prompt as one user message in the tokenizer's chat template (see
	// tokenizer.Chat), after a system message System when it is not "" (else the template's
	// default, if any), with the generation prompt. Without Chat the prompt is encoded with
	// the tokenizer's special tokens (BOS).
	Chat   bool
	System string
	// Tokenizer encodes the prompt and decodes the tokens; nil is the plan's (Model.Generate).
	Tokenizer *tokenizer.Tokenizer
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
// bf16; [1, Vocab] for the last row only, LastRow) or Next, the argmax per row (i32[Seq]; i32[]
// or i32[1] for the last row only), or both.
// A function with a run-time length (plan.Function.Length) over its tokens takes any MinSeq to
// Seq tokens and returns as many rows; a static one takes exactly Seq (MinSeq = Seq).
type Step struct {
	Function    *plan.Function
	Seq, MinSeq int
	Tokens, Pos string // input names
	// Slot, for a batched step of several sequences (a plan compiled with slots, importer
	// --parallel), is the input naming each row's sequence; Pos is then each row's position
	// (i32[Seq]) rather than the first row's.
	Slot       string
	Logits     string     // float [Seq, Vocab] (LastRow: [1, Vocab]) output, or ""
	LogitsType plan.DType // its dtype
	Vocab      int        // 0 when there is no logits output
	Next       string     // i32 argmax output, or ""
	NextPerRow bool       // Next has one token per row (else: the last row's)
	nextIndex  int        // Next's index in Function.Outputs
	// LastRow: Logits, TopIDs and TopLogits hold the last row only ([1, Vocab], [1, TopK]) of a
	// step of more tokens (a generation prefill: the LM head runs on the row generation reads).
	LastRow bool
	// TopK is the number of candidates the device ranks per row (outputs TopIDs, i32[Seq,
	// TopK], and TopLogits, [Seq, TopK] of TopLogitsType); 0 when the function has none.
	TopK                int
	TopIDs, TopLogits   string
	TopLogitsType       plan.DType
	topIDsI, topLogitsI int
}

// The outputs vkc compile adds for sampling (vkc.Options.TopK): the indices of the TopK largest
// logits of each row, largest first, and those logits.
const (
	TopIDsOutput    = "top_ids"
	TopLogitsOutput = "top_logits"
)

// StepFunction recognises f as a step function of a causal language model, or returns nil.
func StepFunction(f *plan.Function) *Step {
	s := &Step{Function: f}
	switch len(f.Inputs) {
	case 2:
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
	case 3:
		// A batched step: tokens, pos and slot, one of each per row, in that order.
		for _, v := range f.Inputs {
			if v.DType != plan.I32 || len(v.Shape) != 1 || v.Shape[0] != f.Inputs[0].Shape[0] || v.Bounded != f.Inputs[0].Bounded {
				return nil
			}
		}
		s.Tokens, s.Pos, s.Slot, s.Seq = f.Inputs[0].Name, f.Inputs[1].Name, f.Inputs[2].Name, int(f.Inputs[0].Shape[0])
	default:
		return nil
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
	// Rows of the logits and the candidates: one per token, or one for the last token (a
	// generation prefill, LastRow); all of them alike.
	rows := 0
	rowsOf := func(v plan.Value) bool {
		r := int(v.Shape[0])
		if r != s.Seq && (r != 1 || v.Bounded) || rows != 0 && r != rows {
			return false
		}
		rows = r
		return true
	}
	for i, v := range f.Outputs {
		isFloat := v.DType == plan.F32 || v.DType == plan.F16 || v.DType == plan.BF16
		switch {
		case v.Name == TopIDsOutput && v.DType == plan.I32 && len(v.Shape) == 2 && v.Shape[1] > 0 && rowsOf(v):
			s.TopIDs, s.topIDsI, s.TopK = v.Name, i, int(v.Shape[1])
		case v.Name == TopLogitsOutput && isFloat && len(v.Shape) == 2 && rowsOf(v):
			s.TopLogits, s.topLogitsI, s.TopLogitsType = v.Name, i, v.DType
		case v.DType == plan.I32 && len(v.Shape) == 1 && int(v.Shape[0]) == s.Seq && s.Next == "":
			s.Next, s.nextIndex, s.NextPerRow = v.Name, i, true
		case v.DType == plan.I32 && (len(v.Shape) == 0 || len(v.Shape) == 1 && v.Shape[0] == 1) && s.Next == "":
			s.Next, s.nextIndex, s.NextPerRow = v.Name, i, s.Seq == 1
		case isFloat && len(v.Shape) == 2 && v.Shape[1] > 0 && s.Logits == "" && rowsOf(v):
			s.Logits, s.LogitsType, s.Vocab = v.Name, v.DType, int(v.Shape[1])
		}
	}
	s.LastRow = rows == 1 && s.Seq > 1
	if s.TopIDs == "" || s.TopLogits == "" || f.Outputs[s.topLogitsI].Shape[1] != int64(s.TopK) {
		s.TopK, s.TopIDs, s.TopLogits = 0, "", "" // candidates need both outputs
	}
	if s.Next == "" && s.Logits == "" {
		return nil
	}
	return s
}

// Bounded reports whether s takes a run-time number of tokens (MinSeq to Seq).
func (s *Step) Bounded() bool { return s.MinSeq < s.Seq }

// Batched reports whether s advances rows of several sequences, each at its own slot and
// position (a plan compiled with slots).
func (s *Step) Batched() bool { return s.Slot != "" }

// inputs are s's inputs for rows of one sequence in slot at positions pos.. (tokens, pos and,
// for a batched step, slot).
func (s *Step) inputs(tokens []int32, pos, slot int) map[string][]byte {
	if !s.Batched() {
		return map[string][]byte{s.Tokens: Int32Bytes(tokens...), s.Pos: Int32Bytes(int32(pos))}
	}
	ps, ss := make([]int32, len(tokens)), make([]int32, len(tokens))
	for i := range tokens {
		ps[i], ss[i] = int32(pos+i), int32(slot)
	}
	return map[string][]byte{s.Tokens: Int32Bytes(tokens...), s.Pos: Int32Bytes(ps...), s.Slot: Int32Bytes(ss...)}
}

// LM is what Generate uses of a causal language model's plan.
type LM struct {
	// Decode is the step function of one token, preferably named "decode" (or, when there is
	// none, a prefill with a run-time length from 1); Prefill the step function with the most
	// tokens, preferably named "prefill" (nil if there is none with more than one).
	Prefill, Decode *Step
	// Context is the number of positions the KV caches hold (ContextLength; 0: unbounded).
	Context int
	// Slots is the number of sequences the caches hold: 1, or for a plan with a batched step
	// (Decode.Batched()) its slots.
	Slots int
}

// CausalLM finds the prefill and decode functions of p, or says why p is not a causal language
// model's plan (listing its functions' signatures).
func CausalLM(p *plan.Plan) (*LM, error) {
	lm := &LM{Context: ContextLength(p), Slots: Slots(p)}
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
// dimension of its state tensors of rank 2 or more (the second of a plan with slots, whose
// caches are [slots, ctx, ...]), or 0 when it has none. Generation must stay below it (the
// cache rows past it do not exist).
func ContextLength(p *plan.Plan) int {
	axis, rank := 0, 2
	if Slots(p) > 1 || batchedPlan(p) {
		axis, rank = 1, 3
	}
	n := 0
	for _, s := range p.State {
		if len(s.Shape) >= rank && (n == 0 || int(s.Shape[axis]) < n) {
			n = int(s.Shape[axis])
		}
	}
	return n
}

// batchedPlan reports whether p has a batched step function.
func batchedPlan(p *plan.Plan) bool {
	for i := range p.Functions {
		if s := StepFunction(&p.Functions[i]); s != nil && s.Batched() {
			return true
		}
	}
	return false
}

// Slots is the number of sequences the plan's KV caches hold: for a plan with a batched step,
// the bound its slot input's range gives (the caches' leading dimension), else 1.
func Slots(p *plan.Plan) int {
	for i := range p.Functions {
		f := &p.Functions[i]
		s := StepFunction(f)
		if s == nil || !s.Batched() {
			continue
		}
		for j, v := range f.Inputs {
			if v.Name != s.Slot {
				continue
			}
			for _, r := range f.Ranges {
				if int(r.Input) == j && len(r.Plus) == 0 && !r.PlusLength && r.Max != plan.NoMax && r.Max >= 0 && r.Max < 1<<20 {
					return int(r.Max) + 1
				}
			}
		}
		n := 0
		for _, st := range p.State {
			if len(st.Shape) >= 3 && (n == 0 || int(st.Shape[0]) < n) {
				n = int(st.Shape[0])
			}
		}
		return max(n, 1)
	}
	return 1
}

// GenerateIDs generates tokens after prompt: the prompt goes through the plan's prefill
// function (in one run when it fits a prefill of run-time length, in chunks of its capacity
// otherwise; a static prefill takes full chunks and decode the rest, so no chunk is ever padded),
// then decode steps follow, each token chosen by opts.Sampling from the previous step's logits
// (see Sampling for what runs on the device and what on the host) and passed to emit (nil:
// none). Generation stops at a token of opts.StopIDs, after opts.MaxTokens tokens, when the KV
// caches are full, or when emit returns ErrStop; another error from emit stops it with that
// error. The sequence starts at position 0, overwriting what the caches held.
//
//	g, err := engine.GenerateIDs(ctx, m, []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 8}, nil)
//	fmt.Println(g.Tokens, g.PerToken())
//
// exe is usually a *Model; any Executable works (tests pass the reference interpreter).
func GenerateIDs(ctx context.Context, exe Executable, prompt []int32, opts GenerateOptions, emit func(id int32) error) (*Generation, error) {
	if m, ok := exe.(*Model); ok {
		return m.GenerateIDs(ctx, prompt, opts, emit)
	}
	g, _, err := generate(ctx, exe, prompt, 0, 0, opts, emit)
	return g, err
}

// generate is GenerateIDs continuing after the first cached tokens of prompt, whose keys and
// values the caches hold already (0 ≤ cached < len(prompt)). It returns the number of positions
// whose cache rows hold the keys and values of the sequence prompt+g.Tokens when it returns
// (the last generated token is never fed back): at least cached, whatever the error.
func generate(ctx context.Context, exe Executable, prompt []int32, cached, slot int, opts GenerateOptions, emit func(id int32) error) (g *Generation, written int, err error) {
	written = cached
	g, err = generateFrom(ctx, exe, prompt, cached, slot, opts, emit, &written)
	return g, written, err
}

// generateFrom is generate; slot is the sequence's slot for a plan with a batched step.
func generateFrom(ctx context.Context, exe Executable, prompt []int32, cached, slot int, opts GenerateOptions, emit func(id int32) error, written *int) (*Generation, error) {
	p := exe.Plan()
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if opts.MaxTokens < 0 {
		return nil, fmt.Errorf("generate: %d max tokens; want 0 (no limit) or more", opts.MaxTokens)
	}
	if err := opts.Sampling.Check(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	lm, err := CausalLM(p)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	prefill, decode := lm.Prefill, lm.Decode
	if lm.Context == 0 && opts.MaxTokens == 0 {
		return nil, errors.New("generate: the plan has no KV cache to bound the generation; give MaxTokens")
	}
	if n := lm.Context; n > 0 && len(prompt) > n {
		return nil, fmt.Errorf("generate: the prompt has %d tokens; the plan's cache holds %d positions", len(prompt), n)
	}
	if vocab := max(decode.Vocab, 0); vocab > 0 {
		for i, t := range prompt {
			if t < 0 || int(t) >= vocab {
				return nil, fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, vocab)
			}
		}
	}
	if cached < 0 || cached >= len(prompt) {
		return nil, fmt.Errorf("generate: %d cached tokens of a %d-token prompt", cached, len(prompt))
	}
	r := &runner{exe: exe, sm: newSampler(opts.Sampling), slot: slot}
	r.sm.see(prompt...)
	g := &Generation{DecodeFn: decode.Function.Name, PromptTokens: len(prompt), Reused: cached}
	r.g = g
	start := time.Now()
	pos := cached
	var next int32
	for prefill != nil && len(prompt)-pos >= prefill.MinSeq && (prefill.Bounded() || len(prompt)-pos >= prefill.Seq) {
		g.PrefillFn = prefill.Function.Name
		n := min(len(prompt)-pos, prefill.Seq)
		last := pos+n == len(prompt)
		if next, err = r.step(ctx, prefill, prompt[pos:pos+n], pos, last); err != nil {
			return nil, err
		}
		pos += n
		*written = pos
		g.Chunks++
	}
	g.Prefilled = pos - cached
	for ; pos < len(prompt); pos++ {
		if next, err = r.step(ctx, decode, prompt[pos:pos+1], pos, pos+1 == len(prompt)); err != nil {
			return nil, err
		}
		*written = pos + 1
	}
	g.Prompt = time.Since(start)
	for {
		if slices.Contains(opts.StopIDs, next) {
			g.Stopped = StopToken
			break
		}
		g.Tokens = append(g.Tokens, next)
		r.sm.see(next)
		if emit != nil {
			if err := emit(next); errors.Is(err, ErrStop) {
				g.Stopped = StopCallback
				break
			} else if err != nil {
				return g, err
			}
		}
		if opts.MaxTokens > 0 && len(g.Tokens) >= opts.MaxTokens {
			g.Stopped = StopMaxTokens
			break
		}
		if lm.Context > 0 && pos >= lm.Context {
			g.Stopped = StopContext // no row left to feed the token at
			break
		}
		t0 := time.Now()
		if next, err = r.step(ctx, decode, []int32{next}, pos, true); err != nil {
			return g, err
		}
		g.Steps = append(g.Steps, time.Since(t0))
		pos++
		*written = pos
	}
	return g, nil
}

// runner runs the steps of one generation and chooses their tokens.
type runner struct {
	exe  Executable
	sm   *sampler
	g    *Generation
	slot int // the sequence's slot (a batched step)
}

// What a step reads back to choose its token.
type readback uint8

const (
	readNothing    readback = iota // a prefill chunk before the last
	readNext                       // the device's argmax
	readCandidates                 // the device's TopK (index, logit) pairs
	readRow                        // the logits
)

// plan says what a step of s reads back when it chooses a token.
func (r *runner) plan(s *Step) readback {
	sp := r.sm.s
	switch {
	case sp.Greedy() && !sp.penalised() && s.Next != "":
		return readNext
	case sp.Greedy() && s.TopK > 0:
		return readCandidates // the penalised argmax from the candidates when they suffice
	case !sp.Greedy() && sp.TopK > 0 && sp.TopK <= s.TopK:
		return readCandidates
	}
	return readRow
}

// step runs s on tokens at pos; when choose is set it returns the token chosen after the last
// one (else 0, reading nothing back where the executable allows).
func (r *runner) step(ctx context.Context, s *Step, tokens []int32, pos int, choose bool) (int32, error) {
	rb := readNothing
	if choose {
		rb = r.plan(s)
	}
	outs, err := r.run(ctx, s, tokens, pos, rb)
	if err != nil {
		return 0, err
	}
	switch rb {
	case readNothing:
		return 0, nil
	case readNext:
		ids := Int32s(outs[s.Next])
		if len(ids) == 0 {
			return 0, fmt.Errorf("generate: %s returned no %s", s.Function.Name, s.Next)
		}
		if s.NextPerRow {
			return ids[len(tokens)-1], nil
		}
		return ids[len(ids)-1], nil
	case readCandidates:
		cands, err := candidatesOf(s, outs, len(tokens))
		if err != nil {
			return 0, err
		}
		r.g.Candidates = s.TopK
		if id, ok := r.sm.fromCandidates(cands); ok {
			return id, nil
		}
		// The candidates do not decide it (a penalty reached past them): the whole row, from
		// this run's outputs when they are there, else by running the step again (it writes
		// the same cache rows with the same values).
		if outs[s.Logits] == nil {
			if outs, err = r.run(ctx, s, tokens, pos, readRow); err != nil {
				return 0, err
			}
		}
	}
	if s.Logits == "" {
		return 0, fmt.Errorf("generate: %s has no logits output to sample from (only %s)", s.Function.Name, s.Next)
	}
	row, err := lastRow(s, outs, len(tokens))
	if err != nil {
		return 0, err
	}
	r.g.RowSteps++
	if r.sm.s.Greedy() && !r.sm.s.penalised() {
		r.g.HostArgmax = true
		return int32(Argmax(row)), nil
	}
	return r.sm.fromRow(row), nil
}

// run runs s, reading back what rb needs (everything, for an executable without RunInto).
func (r *runner) run(ctx context.Context, s *Step, tokens []int32, pos int, rb readback) (map[string][]byte, error) {
	in := s.inputs(tokens, pos, r.slot)
	var outs map[string][]byte
	var err error
	if ri, ok := r.exe.(runInto); ok {
		outs = map[string][]byte{}
		want := func(i int) error {
			v := s.Function.Outputs[i]
			n, err := v.Bytes()
			if err != nil {
				return err
			}
			if v.Bounded {
				n = n / uint64(s.Seq) * uint64(len(tokens)) // a run at length n returns n rows
			}
			outs[v.Name] = make([]byte, n)
			return nil
		}
		switch rb {
		case readNext:
			err = want(s.nextIndex)
		case readCandidates:
			if err = want(s.topIDsI); err == nil {
				err = want(s.topLogitsI)
			}
		case readRow:
			for i, v := range s.Function.Outputs {
				if v.Name == s.Logits && err == nil {
					err = want(i)
				}
			}
		}
		if err == nil {
			err = ri.RunInto(ctx, s.Function.Name, in, outs)
		}
	} else {
		outs, err = r.exe.Run(ctx, s.Function.Name, in)
	}
	if err != nil {
		return nil, fmt.Errorf("generate: %s at position %d: %w", s.Function.Name, pos, err)
	}
	return outs, nil
}

// candidatesOf reads the last row's TopK candidates of a run over n tokens.
func candidatesOf(s *Step, outs map[string][]byte, n int) ([]candidate, error) {
	return candidatesAt(s, outs, n, n-1)
}

// candidatesAt reads row last's TopK candidates of a run over n tokens.
func candidatesAt(s *Step, outs map[string][]byte, n, last int) ([]candidate, error) {
	ids := Int32s(outs[s.TopIDs])
	rows := n
	switch {
	case s.LastRow:
		rows, last = 1, 0 // the last row is the only one
	case !s.Function.Outputs[s.topIDsI].Bounded:
		rows = s.Seq
	}
	lb := outs[s.TopLogits]
	esize := 4
	if s.TopLogitsType != plan.F32 {
		esize = 2
	}
	if len(ids) != rows*s.TopK || len(lb) != rows*s.TopK*esize {
		return nil, fmt.Errorf("generate: %s returned %d candidate ids and %d bytes of their logits, want %d×%d", s.Function.Name, len(ids), len(lb), rows, s.TopK)
	}
	t := &Tensor{DType: s.TopLogitsType, Shape: []int64{int64(s.TopK)}, Data: lb[last*s.TopK*esize : (last+1)*s.TopK*esize]}
	lg, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	c := make([]candidate, s.TopK)
	for i := range c {
		c[i] = candidate{ids[last*s.TopK+i], float64(lg[i])}
		if c[i].id < 0 || s.Vocab > 0 && int(c[i].id) >= s.Vocab {
			return nil, fmt.Errorf("generate: %s ranked token %d, outside the vocabulary", s.Function.Name, c[i].id)
		}
	}
	return c, nil
}

// lastRow reads the last row of logits of a run over n tokens.
func lastRow(s *Step, outs map[string][]byte, n int) ([]float32, error) {
	return rowAt(s, outs, n, n-1)
}

// rowAt reads row i of the logits of a run over n tokens.
func rowAt(s *Step, outs map[string][]byte, n, i int) ([]float32, error) {
	b := outs[s.Logits]
	esize := 4
	if s.LogitsType != plan.F32 {
		esize = 2
	}
	rows := s.Seq
	switch {
	case s.LastRow:
		rows, i = 1, 0 // the last row is the only one
	case s.Bounded():
		rows = n // a run at length n returns n rows
	}
	if len(b) != rows*s.Vocab*esize {
		return nil, fmt.Errorf("generate: %s returned %d bytes of logits, want %d×%d %s", s.Function.Name, len(b), rows, s.Vocab, s.LogitsType)
	}
	row := b[i*s.Vocab*esize : (i+1)*s.Vocab*esize]
	t := &Tensor{DType: s.LogitsType, Shape: []int64{int64(s.Vocab)}, Data: row}
	logits, err := t.Float32s()
	if err != nil {
		return nil, fmt.Errorf("generate: %s: %w", s.Function.Name, err)
	}
	return logits, nil
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
