package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vkc-project/vkc/runtime"
)

// The scheduler: continuous batching over a plan with slots (a batched step whose caches hold
// several sequences, importer --parallel). Generations are admitted into free slots as they
// arrive; each step of the loop runs either one bounded chunk of one prompt, or one decode step
// that advances every generating sequence by a token in one batched run; the two alternate
// while both have work, so a new prompt delays the running sequences by at most one chunk per
// token. A sequence leaves its slot at its end token, a stop, its limit, a full context, an
// error or cancellation; its slot keeps the keys and values it wrote, so that a later prompt
// starting with the same tokens (the next turn of a chat, a shared system prompt) runs only
// the rest.
//
// Results do not depend on what else runs: each row of a batched run is computed by the same
// kernels whatever the other rows (the plan's decode steps of 1 to slots rows share one
// compiled variant, vkc.Options.LengthVariants), a prompt is cut into the same chunks alone or
// not, and those run alone; so a greedy generation gives the same tokens alone or batched.
//
// The loop runs in a goroutine of its own while there is work, holding the model's generation
// lock (so Model.Run and the other direct runs wait until it is idle). Tokens reach the
// generation's caller through its request, never by a callback from the loop: a slow consumer
// does not hold up the others.

// DefaultPrefillChunk is the most prompt tokens one step of the scheduler runs
// (Options.PrefillChunk).
const DefaultPrefillChunk = 64

type scheduler struct {
	m     *Model
	exe   *runtime.Executable
	step  *Step
	lm    *LM
	chunk int

	mu       sync.Mutex
	queue    []*seqReq // waiting for a slot, in arrival order
	active   []*seqReq // in a slot, in admission order
	slots    []slotRec
	running  bool // the loop goroutine is alive
	closed   bool
	tick     uint64 // counts admissions, for least-recently-used slots
	lastRows int    // sequences the last decode step advanced
	steps    uint64 // decode steps run
	rows     uint64 // sequences they advanced
	decoded  bool   // the last step was a decode step (the next goes to a chunk when one waits)
}

// slotRec is what a slot's cache holds.
type slotRec struct {
	tokens []int32 // the tokens whose keys and values rows 0..len-1 hold
	busy   bool
	used   uint64 // tick of the last admission
}

// seqReq is one generation in the scheduler.
type seqReq struct {
	ctx    context.Context
	prompt []int32
	opts   GenerateOptions
	reuse  bool // continue from a slot's cached prefix
	prefer int  // the slot to use when it is free (a Session's), or -1
	sm     *sampler

	// Owned by the loop until done (under scheduler.mu when read from outside).
	g       *Generation
	slot    int
	pos     int // positions of the slot written (rows 0..pos-1 hold this sequence)
	fed     int // prompt tokens whose rows are written
	next    int32
	started time.Time
	last    time.Time // when its last token was chosen

	// Shared with the caller, under scheduler.mu.
	out     []int32 // tokens chosen, not yet taken by the caller
	done    bool
	err     error
	stopped bool // the caller stopped it (ErrStop, an error of emit, its context)
	notify  chan struct{}
}

func newScheduler(m *Model, lm *LM, chunk int) *scheduler {
	if chunk <= 0 {
		chunk = DefaultPrefillChunk
	}
	chunk = min(chunk, lm.Decode.Seq)
	return &scheduler{m: m, exe: m.Executable, step: lm.Decode, lm: lm, chunk: chunk, slots: make([]slotRec, lm.Slots)}
}

// generate runs a generation through the scheduler and passes its tokens to emit in the
// caller's goroutine. reuse continues from the longest cached prefix of a slot; prefer is the
// slot wanted (or -1). It returns the generation and the slot it ran in.
func (sc *scheduler) generate(ctx context.Context, prompt []int32, reuse bool, prefer int, opts GenerateOptions, emit func(int32) error) (*Generation, int, error) {
	if err := checkGenerate(sc.lm, prompt, opts); err != nil {
		return nil, -1, err
	}
	r := &seqReq{ctx: ctx, prompt: prompt, opts: opts, reuse: reuse, prefer: prefer, sm: newSampler(opts.Sampling),
		slot: -1, notify: make(chan struct{}, 1)}
	r.sm.see(prompt...)
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return nil, -1, runtime.ErrClosed
	}
	sc.queue = append(sc.queue, r)
	if !sc.running {
		sc.running = true
		go sc.loop()
	}
	sc.mu.Unlock()
	var emitErr error
	emitted := 0
	for {
		select {
		case <-r.notify:
		case <-ctx.Done():
			sc.stop(r)
		}
		sc.mu.Lock()
		toks, done := r.out, r.done
		r.out = nil
		sc.mu.Unlock()
		for _, id := range toks {
			if emitErr != nil {
				break
			}
			emitted++
			if emit == nil {
				continue
			}
			if err := emit(id); err != nil {
				emitErr = err
				sc.stop(r)
			}
		}
		if done {
			break
		}
	}
	// The loop is done with r: its generation is the caller's now.
	g, err := r.g, r.err
	switch {
	case errors.Is(emitErr, ErrStop):
		// The loop may have chosen a token or two past the one the callback stopped at: they
		// were not emitted and are not part of the generation.
		g.Tokens = g.Tokens[:min(len(g.Tokens), emitted)]
		g.Stopped, err = StopCallback, nil
	case emitErr != nil:
		g.Tokens = g.Tokens[:min(len(g.Tokens), emitted)]
		err = emitErr
	case err == nil && g.Stopped == "":
		err = ctx.Err() // stopped because the caller's context ended
		if err == nil {
			err = runtime.ErrClosed
		}
	}
	return g, r.slot, err
}

// stop asks the loop to end r (the caller stopped it or went away); the loop ends it before its
// next step.
func (sc *scheduler) stop(r *seqReq) {
	sc.mu.Lock()
	r.stopped = true
	sc.mu.Unlock()
}

// close fails every generation and waits for the loop to end.
func (sc *scheduler) close() {
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	for {
		sc.mu.Lock()
		running := sc.running
		sc.mu.Unlock()
		if !running {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// activity reports the slots, the sequences in them, those waiting, and the last decode step's.
func (sc *scheduler) activity() Activity {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return Activity{Slots: len(sc.slots), Busy: len(sc.active), Waiting: len(sc.queue), LastBatch: sc.lastRows,
		DecodeSteps: sc.steps, DecodeRows: sc.rows}
}

// forget drops what the slots are known to hold (a run the scheduler did not make).
func (sc *scheduler) forget() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i := range sc.slots {
		sc.slots[i].tokens = nil
	}
}

// checkGenerate checks a generation's arguments as GenerateIDs does.
func checkGenerate(lm *LM, prompt []int32, opts GenerateOptions) error {
	if len(prompt) == 0 {
		return errors.New("generate: empty prompt")
	}
	if opts.MaxTokens < 0 {
		return fmt.Errorf("generate: %d max tokens; want 0 (no limit) or more", opts.MaxTokens)
	}
	if err := opts.Sampling.Check(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if lm.Context == 0 && opts.MaxTokens == 0 {
		return errors.New("generate: the plan has no KV cache to bound the generation; give MaxTokens")
	}
	if n := lm.Context; n > 0 && len(prompt) > n {
		return fmt.Errorf("generate: the prompt has %d tokens; the plan's cache holds %d positions", len(prompt), n)
	}
	if vocab := max(lm.Decode.Vocab, 0); vocab > 0 {
		for i, t := range prompt {
			if t < 0 || int(t) >= vocab {
				return fmt.Errorf("generate: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, vocab)
			}
		}
	}
	return nil
}

// loop runs steps while there is work, then returns (generate starts it again).
func (sc *scheduler) loop() {
	locked := false
	defer func() {
		if locked {
			sc.m.unlock()
		}
	}()
	for {
		sc.mu.Lock()
		sc.reap()
		if !sc.closed {
			sc.admit()
		}
		if len(sc.active) == 0 && len(sc.queue) == 0 {
			sc.running = false
			sc.mu.Unlock()
			return
		}
		if len(sc.active) == 0 {
			// Everything queued waits for slots held by... nothing: cannot happen (a free slot
			// admits); guard against a spin.
			sc.mu.Unlock()
			time.Sleep(time.Millisecond)
			continue
		}
		var chunkReq *seqReq
		var decode []*seqReq
		for _, r := range sc.active {
			if r.fed < len(r.prompt) {
				if chunkReq == nil {
					chunkReq = r
				}
			} else {
				decode = append(decode, r)
			}
		}
		doChunk := chunkReq != nil && (len(decode) == 0 || sc.decoded)
		sc.decoded = !doChunk
		if !doChunk {
			sc.lastRows = len(decode)
			sc.steps++
			sc.rows += uint64(len(decode))
		}
		sc.mu.Unlock()
		if !locked {
			sc.m.lock(context.Background())
			locked = true
			sc.m.kv.tokens = nil // the single-sequence record does not apply to slots
		}
		if doChunk {
			sc.runChunk(chunkReq)
		} else {
			sc.runDecode(decode)
		}
	}
}

// admit moves queued requests into free slots (under mu).
func (sc *scheduler) admit() {
	for len(sc.queue) > 0 {
		r := sc.queue[0]
		s := sc.chooseSlot(r)
		if s < 0 {
			return
		}
		sc.queue = sc.queue[1:]
		sc.tick++
		rec := &sc.slots[s]
		rec.busy, rec.used = true, sc.tick
		cached := 0
		if r.reuse {
			cached = commonPrefix32(rec.tokens, r.prompt)
			cached = min(cached, len(r.prompt)-1)
		}
		rec.tokens = rec.tokens[:cached]
		r.slot, r.pos, r.fed = s, cached, cached
		r.started = time.Now()
		r.g = &Generation{DecodeFn: sc.step.Function.Name, PromptTokens: len(r.prompt), Reused: cached}
		sc.active = append(sc.active, r)
	}
}

// chooseSlot picks a free slot for r: its preferred one, else the one whose cache shares the
// longest prefix with its prompt, else the least recently used; -1 when none is free.
func (sc *scheduler) chooseSlot(r *seqReq) int {
	if p := r.prefer; p >= 0 && p < len(sc.slots) && !sc.slots[p].busy {
		return p
	}
	best, bestLen := -1, 0
	for i := range sc.slots {
		s := &sc.slots[i]
		if s.busy {
			continue
		}
		l := 0
		if r.reuse {
			l = commonPrefix32(s.tokens, r.prompt)
		}
		if best < 0 || l > bestLen || l == bestLen && s.used < sc.slots[best].used {
			best, bestLen = i, l
		}
	}
	return best
}

func commonPrefix32(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// reap ends the requests stopped by their callers or whose contexts ended (under mu).
func (sc *scheduler) reap() {
	q := sc.queue[:0]
	for _, r := range sc.queue {
		if r.stopped || r.ctx.Err() != nil || sc.closed {
			r.g = &Generation{DecodeFn: sc.step.Function.Name, PromptTokens: len(r.prompt)}
			sc.finish(r, r.ctx.Err())
			continue
		}
		q = append(q, r)
	}
	sc.queue = q
	for _, r := range slices.Clone(sc.active) {
		if r.stopped || r.ctx.Err() != nil || sc.closed {
			sc.finish(r, r.ctx.Err())
		}
	}
}

// finish ends r (under mu): its slot keeps the rows it wrote, its caller is told.
func (sc *scheduler) finish(r *seqReq, err error) {
	if r.slot >= 0 {
		rec := &sc.slots[r.slot]
		seq := append(append(make([]int32, 0, len(r.prompt)+len(r.g.Tokens)), r.prompt...), r.g.Tokens...)
		rec.tokens = append(rec.tokens[:0], seq[:min(r.pos, len(seq))]...)
		rec.busy = false
		if i := slices.Index(sc.active, r); i >= 0 {
			sc.active = slices.Delete(sc.active, i, i+1)
		}
	}
	r.done, r.err = true, err
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// deliver records r's chosen token next and checks its stop conditions (under mu); it reports
// whether r goes on.
func (sc *scheduler) deliver(r *seqReq, next int32) bool {
	g := r.g
	if slices.Contains(r.opts.StopIDs, next) {
		g.Stopped = StopToken
		sc.finish(r, nil)
		return false
	}
	g.Tokens = append(g.Tokens, next)
	r.sm.see(next)
	r.out = append(r.out, next)
	select {
	case r.notify <- struct{}{}:
	default:
	}
	if r.opts.MaxTokens > 0 && len(g.Tokens) >= r.opts.MaxTokens {
		g.Stopped = StopMaxTokens
		sc.finish(r, nil)
		return false
	}
	if sc.lm.Context > 0 && r.pos >= sc.lm.Context {
		g.Stopped = StopContext
		sc.finish(r, nil)
		return false
	}
	r.next, r.last = next, time.Now()
	return true
}

// runChunk runs the next chunk of r's prompt (a run of its own: the chunks of a prompt are the
// same whatever else is running).
func (sc *scheduler) runChunk(r *seqReq) {
	n := min(len(r.prompt)-r.fed, sc.chunk)
	last := r.fed+n == len(r.prompt)
	tokens := r.prompt[r.fed : r.fed+n]
	pos, slot := make([]int32, n), make([]int32, n)
	for i := range pos {
		pos[i], slot[i] = int32(r.fed+i), int32(r.slot)
	}
	want := map[*seqReq]int{}
	if last {
		want[r] = n - 1
	}
	outs, err := sc.run(tokens, pos, slot, want)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if err != nil {
		sc.finish(r, err)
		return
	}
	r.fed += n
	r.pos += n
	r.g.Chunks++
	r.g.Prefilled += n
	r.g.PrefillFn = sc.step.Function.Name
	if !last {
		return
	}
	r.g.Prompt = time.Since(r.started)
	next, err := sc.choose(r, outs, n, n-1)
	if err != nil {
		sc.finish(r, err)
		return
	}
	sc.deliver(r, next)
}

// runDecode advances every sequence in rs by one token in one batched run.
func (sc *scheduler) runDecode(rs []*seqReq) {
	n := len(rs)
	tokens, pos, slot := make([]int32, n), make([]int32, n), make([]int32, n)
	want := map[*seqReq]int{}
	for i, r := range rs {
		tokens[i], pos[i], slot[i] = r.next, int32(r.pos), int32(r.slot)
		want[r] = i
	}
	outs, err := sc.run(tokens, pos, slot, want)
	now := time.Now()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i, r := range rs {
		if r.done {
			continue
		}
		if err != nil {
			sc.finish(r, err)
			continue
		}
		r.pos++
		r.g.Steps = append(r.g.Steps, now.Sub(r.last))
		next, err := sc.choose(r, outs, n, i)
		if err != nil {
			sc.finish(r, err)
			continue
		}
		sc.deliver(r, next)
	}
}

// run runs the batched step over the rows, reading back what the requests in want (by their
// row) need to choose their tokens.
func (sc *scheduler) run(tokens, pos, slot []int32, want map[*seqReq]int) (map[string][]byte, error) {
	s := sc.step
	in := map[string][]byte{s.Tokens: Int32Bytes(tokens...), s.Pos: Int32Bytes(pos...), s.Slot: Int32Bytes(slot...)}
	n := len(tokens)
	need := map[readback]bool{}
	rr := &runner{}
	for r := range want {
		rr.sm = r.sm
		rb := rr.plan(s)
		need[rb] = true
		if rb == readCandidates && r.sm.s.penalised() {
			need[readRow] = true // the candidates may not decide a penalised step
		}
	}
	outs := map[string][]byte{}
	add := func(i int) error {
		v := s.Function.Outputs[i]
		b, err := v.Bytes()
		if err != nil {
			return err
		}
		if v.Bounded {
			b = b / uint64(s.Seq) * uint64(n)
		}
		outs[v.Name] = make([]byte, b)
		return nil
	}
	var err error
	if need[readNext] {
		err = add(s.nextIndex)
	}
	if need[readCandidates] && err == nil {
		if err = add(s.topIDsI); err == nil {
			err = add(s.topLogitsI)
		}
	}
	if need[readRow] && err == nil {
		for i, v := range s.Function.Outputs {
			if v.Name == s.Logits && err == nil {
				err = add(i)
			}
		}
	}
	if err == nil {
		err = sc.exe.RunInto(context.Background(), s.Function.Name, in, outs)
	}
	if err != nil {
		return nil, fmt.Errorf("generate: %s over %d rows: %w", s.Function.Name, n, err)
	}
	return outs, nil
}

// choose chooses r's next token from row i of a run over n rows.
func (sc *scheduler) choose(r *seqReq, outs map[string][]byte, n, i int) (int32, error) {
	s := sc.step
	rr := &runner{sm: r.sm, g: r.g}
	switch rr.plan(s) {
	case readNext:
		ids := Int32s(outs[s.Next])
		if i >= len(ids) {
			return 0, fmt.Errorf("generate: %s returned %d of %s, want row %d", s.Function.Name, len(ids), s.Next, i)
		}
		return ids[i], nil
	case readCandidates:
		cands, err := candidatesAt(s, outs, n, i)
		if err != nil {
			return 0, err
		}
		r.g.Candidates = s.TopK
		if id, ok := r.sm.fromCandidates(cands); ok {
			return id, nil
		}
	}
	if s.Logits == "" {
		return 0, fmt.Errorf("generate: %s has no logits output to sample from (only %s)", s.Function.Name, s.Next)
	}
	row, err := rowAt(s, outs, n, i)
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
