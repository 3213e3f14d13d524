package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/tokenizer"
)

// loadPlan loads a plan TestMain compiled, or skips when there is no Vulkan device to compile
// and run it on.
func loadPlan(t *testing.T, name string) *engine.Model {
	t.Helper()
	if _, err := os.Stat(name); err != nil {
		t.Skipf("needs a Vulkan device (lavapipe is enough): TestMain compiled no %s", name)
	}
	m, err := engine.Load(name, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// prompts are n prompts of 5..12 tokens of tinyllama's vocabulary, each starting with another
// token (so that no two share a prefix).
func prompts(n int) [][]int32 {
	out := make([][]int32, n)
	for i := range out {
		p := make([]int32, 5+i%8)
		for j := range p {
			p[j] = int32((31*i + 7*j*j + 3) % 256)
		}
		out[i] = p
	}
	return out
}

// Issue 25, item 8: generations on one Model from 8 goroutines at once each return the tokens
// the same generation returns alone (they took turns on the one KV cache instead of
// interleaving their steps on it). Under go test -race this also checks the engine's locking.
func TestConcurrentGenerateIDs(t *testing.T) {
	m := loadPlan(t, "tinyllama.plan")
	ctx := context.Background()
	ps := prompts(8)
	want := make([]string, len(ps))
	for i, p := range ps {
		g, err := m.GenerateIDs(ctx, p, engine.GenerateOptions{MaxTokens: 6}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = fmt.Sprint(g.Tokens)
	}
	for _, how := range []string{"Model.GenerateIDs", "GenerateIDs", "Session.GenerateIDs", "Model.Call between"} {
		got := make([]string, len(ps))
		errs := make([]error, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var g *engine.Generation
				var err error
				switch how {
				case "Model.GenerateIDs":
					g, err = m.GenerateIDs(ctx, p, engine.GenerateOptions{MaxTokens: 6}, nil)
				case "GenerateIDs":
					g, err = engine.GenerateIDs(ctx, m, p, engine.GenerateOptions{MaxTokens: 6}, nil)
				case "Session.GenerateIDs":
					g, err = m.NewSession().GenerateIDs(ctx, p, engine.GenerateOptions{MaxTokens: 6}, nil)
				case "Model.Call between":
					// Runs of decode at other positions, through Model, between the steps of
					// the generations: they wait for a whole generation too.
					if i%2 == 1 {
						_, err = m.Call(ctx, "decode", map[string]any{"tokens": []int32{int32(i)}, "pos": i})
						g = &engine.Generation{}
						errs[i] = err
						return
					}
					g, err = m.GenerateIDs(ctx, p, engine.GenerateOptions{MaxTokens: 6}, nil)
				}
				errs[i] = err
				if g != nil {
					got[i] = fmt.Sprint(g.Tokens)
				}
			}()
		}
		wg.Wait()
		for i := range ps {
			if errs[i] != nil {
				t.Errorf("%s: generation %d: %v", how, i, errs[i])
				continue
			}
			if how == "Model.Call between" && i%2 == 1 {
				continue
			}
			if got[i] != want[i] {
				t.Errorf("%s: generation %d of 8 concurrent ones gave %s, alone %s", how, i, got[i], want[i])
			}
		}
	}
}

// A Session's next turn, a prompt that extends the previous prompt and reply, runs only the new
// tokens and gives the tokens of running the whole prompt from position 0. Another session's
// generation in between overwrites the rows past the prompts' common prefix; the next turn then
// runs from there, with the same result.
func TestSessionReusesCache(t *testing.T) {
	m := loadPlan(t, "tinyllama.plan")
	ctx := context.Background()
	opts := engine.GenerateOptions{MaxTokens: 5}
	s := m.NewSession()
	p1 := prompts(3)[2]
	g1, err := s.GenerateIDs(ctx, p1, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g1.Reused != 0 {
		t.Errorf("first turn reused %d tokens", g1.Reused)
	}
	p2 := append(append(append([]int32(nil), p1...), g1.Tokens...), 9, 8, 7)
	g2, err := s.GenerateIDs(ctx, p2, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The last generated token was never fed back: its row is not in the cache.
	if want := len(p1) + len(g1.Tokens) - 1; g2.Reused != want {
		t.Errorf("second turn reused %d tokens, want %d", g2.Reused, want)
	}
	fresh, err := m.GenerateIDs(ctx, p2, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g2.Tokens) != fmt.Sprint(fresh.Tokens) || fresh.Reused != 0 {
		t.Errorf("continued from the cache: %v; from position 0: %v (reused %d)", g2.Tokens, fresh.Tokens, fresh.Reused)
	}
	// Another session shares the first 3 tokens and overwrites the rest.
	other := append(append([]int32(nil), p2[:3]...), 200, 201)
	if _, err := m.NewSession().GenerateIDs(ctx, other, opts, nil); err != nil {
		t.Fatal(err)
	}
	p3 := append(append(append([]int32(nil), p2...), g2.Tokens...), 1)
	g3, err := s.GenerateIDs(ctx, p3, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh3, err := m.GenerateIDs(ctx, p3, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Reused != 3 || fmt.Sprint(g3.Tokens) != fmt.Sprint(fresh3.Tokens) {
		t.Errorf("after another session: reused %d (want 3), tokens %v, from position 0 %v", g3.Reused, g3.Tokens, fresh3.Tokens)
	}
	// A run through Model forgets what the cache holds.
	if _, err := m.Call(ctx, "decode", map[string]any{"tokens": []int32{1}, "pos": 0}); err != nil {
		t.Fatal(err)
	}
	g4, err := s.GenerateIDs(ctx, p3, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g4.Reused != 0 || fmt.Sprint(g4.Tokens) != fmt.Sprint(fresh3.Tokens) {
		t.Errorf("after a run: reused %d (want 0), tokens %v, want %v", g4.Reused, g4.Tokens, fresh3.Tokens)
	}
}

// chatPlan compiles tinyllama's shape with a byte-level vocabulary and the ChatML tokens, and
// returns the model loaded and the tokenizer.
func chatPlan(t *testing.T) (*engine.Model, *tokenizer.Tokenizer) {
	t.Helper()
	if _, err := os.Stat("tinyllama.plan"); err != nil {
		t.Skip("needs a Vulkan device (lavapipe is enough)")
	}
	tmpl := `{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`
	dir := t.TempDir()
	tok, err := tokenizer.Load(ByteTokenizer(t, dir, []string{"<|im_start|>", "<|im_end|>"}, map[string]any{"eos_token": "<|im_end|>", "chat_template": tmpl}))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := vkc.Compile(context.Background(), textModel(t, 258, 4), vkc.Options{ArgmaxOutput: true, Tokenizer: dir})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chat.plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(path, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, tok
}

// Session.Chat: a conversation's second turn (the first reply and a new user message appended)
// runs only its new tokens and says what a new session says for the whole conversation; the
// streamed pieces make up the message.
func TestSessionChat(t *testing.T) {
	m, _ := chatPlan(t)
	ctx := context.Background()
	opts := engine.GenerateOptions{MaxTokens: 12}
	s := m.NewSession()
	msgs := []engine.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	g1, err := s.Chat(ctx, msgs, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, engine.Message{Role: "assistant", Content: g1.Text}, engine.Message{Role: "user", Content: "And then?"})
	var pieces string
	g2, err := s.Chat(ctx, msgs, opts, func(s string) error { pieces += s; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if g2.Reused < g1.PromptTokens || pieces != g2.Text {
		t.Errorf("second turn: reused %d of %d prompt tokens (the first turn's prompt had %d); streamed %q, text %q", g2.Reused, g2.PromptTokens, g1.PromptTokens, pieces, g2.Text)
	}
	if err := m.ResetState(); err != nil {
		t.Fatal(err)
	}
	g3, err := m.NewSession().Chat(ctx, msgs, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g3.Reused != 0 || g3.Text != g2.Text || fmt.Sprint(g3.Tokens) != fmt.Sprint(g2.Tokens) {
		t.Errorf("the whole conversation in a new session: reused %d, %q %v; continued: %q %v", g3.Reused, g3.Text, g3.Tokens, g2.Text, g2.Tokens)
	}
	// Which role orders are valid is the template's to say (it may raise_exception, as Gemma's
	// does); this one renders any, so only an empty conversation is refused here.
	for _, bad := range [][]engine.Message{
		nil,
	} {
		if _, err := s.Chat(ctx, bad, opts, nil); err == nil {
			t.Errorf("conversation %v accepted", bad)
		}
	}
}
