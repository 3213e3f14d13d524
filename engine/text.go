package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/vkc-project/vkc/tokenizer"
)

// GenerateText generates text after prompt with the tokenizer tok: the prompt is encoded (with
// the tokenizer's special tokens, or with opts.Chat rendered in its chat template as one user
// message after opts.System and encoded by tokenizer.EncodeChat), tokens are generated as
// GenerateIDs does, and their text is passed to emit (nil: none) as it is produced. A piece is
// emitted once it is final: never a broken UTF-8 sequence (a character split over tokens waits
// for its last byte), never text a later token rewrites
// (the decoder's output is compared over a window of the tokens before), and never text that
// may turn out to begin one of opts.Stop (held back until it cannot). Special tokens are not
// emitted; the text is the tokenizer.json decoder's (no clean_up_tokenization_spaces). The
// pieces concatenate to Generation.Text.
//
// Generation stops at any of the tokenizer's end-of-generation ids (tokenizer.Tokenizer.EOG: its
// EOS, a config.json's eos_token_id list, a GGUF file's EOT; with Chat, also the template's end
// of turn) unless opts.StopIDs says otherwise, at a stop string (its text not emitted), after opts.MaxTokens
// tokens, when the context is full, or when emit returns ErrStop.
func GenerateText(ctx context.Context, exe Executable, tok *tokenizer.Tokenizer, prompt string, opts GenerateOptions, emit func(text string) error) (*Generation, error) {
	ids, o, err := encodePrompt(tok, prompt, opts)
	if err != nil {
		return nil, err
	}
	return streamText(tok, ids, o, emit, func(emitID func(int32) error) (*Generation, error) {
		return GenerateIDs(ctx, exe, ids, o, emitID)
	})
}

// encodePrompt encodes prompt as GenerateText does and returns the options with the stop tokens
// filled in.
func encodePrompt(tok *tokenizer.Tokenizer, prompt string, opts GenerateOptions) ([]int32, GenerateOptions, error) {
	if tok == nil {
		return nil, opts, errors.New("generate: no tokenizer (the plan records none: compile it with --tokenizer, or give one)")
	}
	var ids []int32
	var err error
	stopIDs := opts.StopIDs
	if opts.Chat {
		chat, err := tok.Chat()
		if err != nil {
			return nil, opts, fmt.Errorf("generate: --chat: %w", err)
		}
		var msgs []tokenizer.Message
		if opts.System != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: opts.System})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: prompt})
		text, err := chat.Render(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
		if err != nil {
			return nil, opts, fmt.Errorf("generate: --chat: %w", err)
		}
		if ids, err = tok.EncodeChat(text); err != nil {
			return nil, opts, fmt.Errorf("generate: the prompt: %w", err)
		}
		if stopIDs == nil && chat.EndOfTurn != "" {
			if id, ok := tok.ID(chat.EndOfTurn); ok {
				stopIDs = append(stopIDs, id)
			}
		}
	} else {
		if opts.System != "" {
			return nil, opts, errors.New("generate: a system message goes with Chat (the chat template places it)")
		}
		if ids, err = tok.Encode(prompt, true); err != nil {
			return nil, opts, fmt.Errorf("generate: the prompt: %w", err)
		}
	}
	if opts.StopIDs == nil {
		for _, id := range tok.EOG() {
			if !containsID(stopIDs, id) {
				stopIDs = append(stopIDs, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil, opts, errors.New("generate: the prompt encodes to no tokens")
	}
	opts.StopIDs = stopIDs
	return ids, opts, nil
}

// streamText runs gen, which generates after the prompt ids passing each token to the function
// it is given, and turns its tokens into text for emit as GenerateText describes (stop strings
// included).
func streamText(tok *tokenizer.Tokenizer, ids []int32, opts GenerateOptions, emit func(text string) error, gen func(emitID func(int32) error) (*Generation, error)) (*Generation, error) {
	for _, s := range opts.Stop {
		if s == "" {
			return nil, errors.New("generate: an empty stop string")
		}
	}
	st := newTextStream(tok, ids)
	stops := &stopMatcher{stops: opts.Stop}
	var text strings.Builder
	out := func(s string) error {
		if s == "" {
			return nil
		}
		text.WriteString(s)
		if emit == nil {
			return nil
		}
		return emit(s)
	}
	stopped := false
	g, err := gen(func(id int32) error {
		piece, err := st.push(id)
		if err != nil {
			return err
		}
		s, hit := stops.feed(piece)
		if err := out(s); err != nil {
			return err
		}
		if hit {
			stopped = true
			return ErrStop
		}
		return nil
	})
	if g == nil {
		return nil, err
	}
	if err != nil {
		g.Text = text.String()
		return g, err
	}
	if stopped {
		g.Stopped = StopString
	} else {
		// The rest: bytes still waiting for a character's end (decoded as U+FFFD, as the
		// tokenizer decodes an incomplete sequence), then text held back for a stop string.
		rest, err := st.flush()
		if err != nil {
			return g, err
		}
		s, hit := stops.feed(rest)
		if hit {
			g.Stopped = StopString
		} else {
			s += stops.flush()
		}
		if err := out(s); err != nil && !errors.Is(err, ErrStop) {
			g.Text = text.String()
			return g, err
		}
	}
	g.Text = text.String()
	return g, nil
}

// Generate generates text after prompt with the plan's tokenizer (or opts.Tokenizer), passing
// the text to emit as it is produced; see GenerateText.
//
//	g, err := m.Generate(ctx, "Once upon a time", engine.GenerateOptions{MaxTokens: 64,
//		Sampling: engine.Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 1}},
//		func(s string) error { fmt.Print(s); return nil })
func (m *Model) Generate(ctx context.Context, prompt string, opts GenerateOptions, emit func(text string) error) (*Generation, error) {
	tok, err := m.tokenizerFor(opts)
	if err != nil {
		return nil, err
	}
	return GenerateText(ctx, m, tok, prompt, opts, emit)
}

// Tokenizer returns the tokenizer the plan records (built once, then kept), or an error saying
// that it records none.
func (m *Model) Tokenizer() (*tokenizer.Tokenizer, error) {
	m.tokOnce.Do(func() {
		p := m.Plan()
		if p.Tokenizer == nil {
			m.tokErr = fmt.Errorf("%s records no tokenizer (compile it with --tokenizer FILE, or give one)", m.Path)
			return
		}
		m.tok, m.tokErr = tokenizer.FromPlan(p.Tokenizer, m.Path)
	})
	return m.tok, m.tokErr
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// contextTokens is how many prompt tokens before the generated ones a textStream decodes with
// them, so that a decoder that treats the first token of its input apart (SentencePiece's
// leading-space strip) sees the generated ones as continuations.
const contextTokens = 5

// textStream turns generated tokens into text as they come (text-generation-inference's
// incremental detokenization): the tokens from prefix on are decoded with and without the new
// ones, and the difference is emitted unless it ends in U+FFFD (a character whose bytes are not
// all there yet).
type textStream struct {
	tok          *tokenizer.Tokenizer
	ids          []int32
	prefix, read int // ids[prefix:read] were emitted as the text of ids[read-…]; ids[read:] not yet
}

func newTextStream(tok *tokenizer.Tokenizer, prompt []int32) *textStream {
	ctx := prompt[max(0, len(prompt)-contextTokens):]
	return &textStream{tok: tok, ids: append([]int32(nil), ctx...), prefix: 0, read: len(ctx)}
}

var streamDecode = tokenizer.DecodeOptions{SkipSpecial: true, NoCleanup: true}

// push adds a token and returns the text that became final ("" while a character is
// incomplete).
func (st *textStream) push(id int32) (string, error) {
	st.ids = append(st.ids, id)
	before, after, err := st.decode()
	if err != nil {
		return "", err
	}
	if len(after) <= len(before) || strings.HasSuffix(after, "\uFFFD") {
		return "", nil
	}
	st.prefix, st.read = st.read, len(st.ids)
	return after[commonPrefix(before, after):], nil
}

// decode is the text of the tokens since prefix without and with those not emitted yet.
func (st *textStream) decode() (before, after string, err error) {
	if before, err = st.tok.Decode(st.ids[st.prefix:st.read], streamDecode); err != nil {
		return "", "", err
	}
	after, err = st.tok.Decode(st.ids[st.prefix:], streamDecode)
	return before, after, err
}

// commonPrefix is the length of the longest common prefix of a and b that ends at a character
// boundary of both: the new text of a decode is b past it (all of b past a when b extends a, as
// it does for the decoders of tokenizer.json).
func commonPrefix(a, b string) int {
	n := 0
	for i, r := range a {
		if i >= len(b) || !strings.HasPrefix(b[i:], string(r)) {
			break
		}
		n = i + len(string(r))
	}
	return n
}

// flush returns the text of the tokens not emitted yet (an incomplete character decodes as
// U+FFFD).
func (st *textStream) flush() (string, error) {
	if st.read == len(st.ids) {
		return "", nil
	}
	before, after, err := st.decode()
	if err != nil {
		return "", err
	}
	st.prefix, st.read = st.read, len(st.ids)
	return after[commonPrefix(before, after):], nil
}

// stopMatcher finds stop strings in streamed text, holding back what may begin one.
type stopMatcher struct {
	stops []string
	held  string
}

// feed adds text and returns what can be emitted; hit reports a stop string (the text before
// it is returned, the rest dropped).
func (m *stopMatcher) feed(s string) (out string, hit bool) {
	buf := m.held + s
	first := -1
	for _, stop := range m.stops {
		if i := strings.Index(buf, stop); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		m.held = ""
		return buf[:first], true
	}
	// Hold back the longest end of buf that begins a stop string. (buf is valid UTF-8 and so is
	// every stop string, so the held part starts at a character.)
	h := 0
	for _, stop := range m.stops {
		for l := min(len(stop)-1, len(buf)); l > h; l-- {
			if strings.HasSuffix(buf, stop[:l]) {
				h = l
				break
			}
		}
	}
	m.held = buf[len(buf)-h:]
	return buf[:len(buf)-h], false
}

// flush returns the held text (no stop string followed it).
func (m *stopMatcher) flush() string {
	s := m.held
	m.held = ""
	return s
}
