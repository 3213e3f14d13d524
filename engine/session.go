package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vkc-project/vkc/runtime"
	"github.com/vkc-project/vkc/tokenizer"
)

// A Model is safe for use from many goroutines. A plan's state holds one sequence's keys and
// values (or, with slots, several: see Session), so what runs on it must not interleave with a
// generation: every generation and every run through Model's methods holds the model's
// generation lock for its whole length. Two goroutines generating on one Model therefore take
// turns, each getting the tokens it would get alone. (The embedded Executable's methods, called
// as m.Executable.Run, bypass the lock: the caller then keeps runs and generations apart.)

// lock takes the model's generation lock, or returns ctx's error if ctx ends first (a request
// whose client went away stops waiting).
func (m *Model) lock(ctx context.Context) error {
	m.waiting.Add(1)
	defer m.waiting.Add(-1)
	select {
	case m.gen <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Model) unlock() { <-m.gen }

// Activity is what a Model is doing, for a server's metrics.
type Activity struct {
	// Slots is the number of sequences the state holds; Busy of them are generating (or being
	// run) now, and Waiting generations and runs wait for one.
	Slots, Busy, Waiting int
	// LastBatch is the number of sequences the last step advanced (at most Slots).
	LastBatch int
	// DecodeSteps counts the batched decode steps run so far, DecodeRows the sequences they
	// advanced together (DecodeRows/DecodeSteps is the mean batch); 0 without slots.
	DecodeSteps, DecodeRows uint64
}

// Activity reports what m is doing now.
func (m *Model) Activity() Activity {
	if m.sched != nil {
		a := m.sched.activity()
		a.Waiting += int(m.waiting.Load())
		return a
	}
	busy := len(m.gen)
	return Activity{Slots: 1, Busy: busy, Waiting: int(m.waiting.Load()), LastBatch: busy}
}

// forget drops what the engine knows the caches hold (a run it did not make changed them).
func (m *Model) forget() {
	m.kv.tokens = nil
	if m.sched != nil {
		m.sched.forget()
	}
}

// kvRecord is what the model knows about its cache: the tokens whose keys and values its rows
// 0..len(tokens)-1 hold, so that a Session's next turn (or any prompt sharing a prefix with the
// last one) runs only its new tokens. nil when unknown (after a run the engine did not make).
type kvRecord struct {
	tokens []int32
}

// reusable is the number of prompt tokens whose cache rows can be kept: the common prefix of
// the record and the prompt, less one so that at least one token runs (its logits choose the
// first generated token).
func (r *kvRecord) reusable(prompt []int32) int {
	n := 0
	for n < len(r.tokens) && n < len(prompt) && r.tokens[n] == prompt[n] {
		n++
	}
	return min(n, len(prompt)-1)
}

// record sets the record after a generation of g after prompt that left written rows valid.
func (r *kvRecord) record(prompt []int32, g *Generation, written int) {
	seq := prompt
	if g != nil && written > len(prompt) {
		seq = append(append(make([]int32, 0, written), prompt...), g.Tokens...)
	}
	r.tokens = append(r.tokens[:0], seq[:min(written, len(seq))]...)
}

// GenerateIDs is GenerateIDs(ctx, m, prompt, opts, emit): the sequence starts at position 0
// (nothing of the cache is reused; a Session reuses it). It holds the model's generation lock
// throughout, so concurrent generations on one Model take turns.
func (m *Model) GenerateIDs(ctx context.Context, prompt []int32, opts GenerateOptions, emit func(id int32) error) (*Generation, error) {
	if m.sched != nil {
		g, _, err := m.sched.generate(ctx, prompt, false, -1, opts, emit)
		return g, err
	}
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.unlock()
	g, written, err := generate(ctx, m.Executable, prompt, 0, 0, opts, emit)
	m.kv.record(prompt, g, written)
	return g, err
}

// generateReusing generates after prompt continuing from the cache rows the record says hold a
// prefix of it; with slots, in the slot *slot when it is free (and sets it to the slot used).
func (m *Model) generateReusing(ctx context.Context, prompt []int32, slot *int, opts GenerateOptions, emit func(id int32) error) (*Generation, error) {
	if m.sched != nil {
		g, used, err := m.sched.generate(ctx, prompt, true, *slot, opts, emit)
		if used >= 0 {
			*slot = used
		}
		return g, err
	}
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.unlock()
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	g, written, err := generate(ctx, m.Executable, prompt, m.kv.reusable(prompt), 0, opts, emit)
	m.kv.record(prompt, g, written)
	return g, err
}

// Run is Executable.Run under the model's generation lock; the engine then no longer knows what
// the cache holds (a Session's next turn runs its whole prompt).
func (m *Model) Run(ctx context.Context, fn string, inputs map[string][]byte) (map[string][]byte, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.unlock()
	m.forget()
	return m.Executable.Run(ctx, fn, inputs)
}

// RunInto is Executable.RunInto under the model's generation lock (see Run).
func (m *Model) RunInto(ctx context.Context, fn string, inputs, outputs map[string][]byte) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.unlock()
	m.forget()
	return m.Executable.RunInto(ctx, fn, inputs, outputs)
}

// ResetState is Executable.ResetState under the model's generation lock.
func (m *Model) ResetState() error {
	m.lock(context.Background())
	defer m.unlock()
	m.forget()
	return m.Executable.ResetState()
}

// Profile is Executable.Profile under the model's generation lock.
func (m *Model) Profile(ctx context.Context, fn string, inputs map[string][]byte) ([]runtime.DispatchTime, runtime.Stats, error) {
	if err := m.lock(ctx); err != nil {
		return nil, runtime.Stats{}, err
	}
	defer m.unlock()
	m.forget()
	return m.Executable.Profile(ctx, fn, inputs)
}

// Measure is Executable.Measure under the model's generation lock.
func (m *Model) Measure(ctx context.Context, fn string, inputs map[string][]byte, o runtime.MeasureOptions) (runtime.Measurement, error) {
	if err := m.lock(ctx); err != nil {
		return runtime.Measurement{}, err
	}
	defer m.unlock()
	m.forget()
	return m.Executable.Measure(ctx, fn, inputs, o)
}

// Session is one conversation (or any sequence of prompts that extend each other) on a Model.
// A prompt that begins with the tokens of the previous turn (prompt and reply) runs only its new
// tokens: the keys and values of the rest are in the cache already. Any number of sessions may
// share a Model and be used from any goroutines; their generations take turns on a plan with
// one sequence of state, and a session whose rows another one overwrote in between runs its
// prompt from the first token that differs (a shared system prompt is kept). One session runs
// one generation at a time.
//
//	s := m.NewSession()
//	g, err := s.Chat(ctx, []engine.Message{{Role: "user", Content: "Hi"}}, opts, emit)
//	msgs = append(msgs, engine.Message{Role: "assistant", Content: g.Text}, next)
//	g, err = s.Chat(ctx, msgs, opts, emit) // runs only the new tokens
type Session struct {
	m    *Model
	mu   sync.Mutex
	slot int // the slot of its last generation (a plan with slots), or -1
}

// NewSession starts a conversation on m.
func (m *Model) NewSession() *Session { return &Session{m: m, slot: -1} }

// GenerateIDs generates after prompt as Model.GenerateIDs does, reusing the cache rows of the
// prompt's longest prefix that they hold (Generation.Reused counts those tokens).
func (s *Session) GenerateIDs(ctx context.Context, prompt []int32, opts GenerateOptions, emit func(id int32) error) (*Generation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.generateReusing(ctx, prompt, &s.slot, opts, emit)
}

// Generate is Model.Generate reusing the cache as GenerateIDs does: a prompt that extends the
// previous one (as text that encodes to an extension of its tokens) runs only the new tokens.
func (s *Session) Generate(ctx context.Context, prompt string, opts GenerateOptions, emit func(text string) error) (*Generation, error) {
	tok, err := s.m.tokenizerFor(opts)
	if err != nil {
		return nil, err
	}
	ids, o, err := encodePrompt(tok, prompt, opts)
	if err != nil {
		return nil, err
	}
	return streamText(tok, ids, o, emit, func(emitID func(int32) error) (*Generation, error) {
		return s.GenerateIDs(ctx, ids, o, emitID)
	})
}

// Message is one message of a conversation: Role is "system", "user" or "assistant".
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Chat generates the assistant's next message after msgs, rendered with the tokenizer's chat
// template (and the generation prompt), streaming its text to emit (nil: none); Generation.Text
// is the message. Generation stops at the template's end of turn, the tokenizer's end-of-generation ids, a stop
// string, opts.MaxTokens or a full context. opts.Chat and opts.System are not used (the messages
// say it). A conversation continued with the reply and a new message runs only the new tokens.
func (s *Session) Chat(ctx context.Context, msgs []Message, opts GenerateOptions, emit func(text string) error) (*Generation, error) {
	tok, err := s.m.tokenizerFor(opts)
	if err != nil {
		return nil, err
	}
	ids, o, err := EncodeChat(tok, msgs, opts)
	if err != nil {
		return nil, err
	}
	return streamText(tok, ids, o, emit, func(emitID func(int32) error) (*Generation, error) {
		return s.GenerateIDs(ctx, ids, o, emitID)
	})
}

// tokenizerFor is opts.Tokenizer, else the plan's.
func (m *Model) tokenizerFor(opts GenerateOptions) (*tokenizer.Tokenizer, error) {
	if opts.Tokenizer != nil {
		return opts.Tokenizer, nil
	}
	return m.Tokenizer()
}

// EncodeChat renders msgs in tok's chat template with the generation prompt and encodes it as
// tokenizer.EncodeChat does (the template holds the special tokens), and returns opts with StopIDs filled in when
// nil: the template's end of turn and the tokenizer's end-of-generation ids (EOS and the others,
// tokenizer.Tokenizer.EOG).
func EncodeChat(tok *tokenizer.Tokenizer, msgs []Message, opts GenerateOptions) ([]int32, GenerateOptions, error) {
	if tok == nil {
		return nil, opts, errors.New("chat: no tokenizer (the plan records none: compile it with --tokenizer, or give one)")
	}
	if len(msgs) == 0 {
		return nil, opts, errors.New("chat: no messages")
	}
	text, eot, err := renderChat(tok, msgs)
	if err != nil {
		return nil, opts, fmt.Errorf("chat: %w", err)
	}
	ids, err := tok.EncodeChat(text)
	if err != nil {
		return nil, opts, fmt.Errorf("chat: the rendered conversation: %w", err)
	}
	if len(ids) == 0 {
		return nil, opts, errors.New("chat: the conversation encodes to no tokens")
	}
	if opts.StopIDs == nil {
		var stop []int32
		if id, ok := tok.ID(eot); ok && eot != "" {
			stop = append(stop, id)
		}
		for _, e := range tok.EOG() {
			if !containsID(stop, e) {
				stop = append(stop, e)
			}
		}
		opts.StopIDs = stop
	}
	opts.Chat, opts.System = false, ""
	return ids, opts, nil
}
