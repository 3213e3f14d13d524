package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/tokenizer/jinja"
)

// oracleDate is the moment the chat-template oracle's strftime_now formats (its README).
var oracleDate = time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)

type chatCase struct {
	Name                string                     `json:"name"`
	Messages            []Message                  `json:"messages"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Kwargs              map[string]json.RawMessage `json:"kwargs"`
	Rendered            *string                    `json:"rendered"`
	Error               *string                    `json:"error"`
	// disagreements.json: the Python jinja2 result (transformers') of a case the two
	// reference renderers disagree on.
	Python *struct {
		Rendered *string `json:"rendered"`
		Error    *string `json:"error"`
	} `json:"python_jinja2"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// oracleChat compiles a template of the chat-template oracle with its special tokens.
func oracleChat(t *testing.T, dir string) *Chat {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(dir, "template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	var special map[string]any
	readJSON(t, filepath.Join(dir, "special_tokens.json"), &special)
	c, err := NewChat(filepath.Join(dir, "template.jinja"), string(src), special)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func renderCase(c *Chat, k chatCase) (string, error) {
	kw := map[string]any{}
	for name, v := range k.Kwargs {
		kw[name] = v
	}
	return c.Render(k.Messages, ChatOptions{AddGenerationPrompt: k.AddGenerationPrompt, Kwargs: kw, Now: oracleDate})
}

// checkCase compares a rendering with the expected text or raise_exception message, byte
// for byte.
func checkCase(t *testing.T, where string, got string, err error, want, wantErr *string) bool {
	t.Helper()
	switch {
	case wantErr != nil:
		var je *jinja.Error
		if !errors.As(err, &je) || !je.Raised || je.Msg != *wantErr {
			t.Errorf("%s: got %q, %v; want the error %q", where, got, err, *wantErr)
			return false
		}
	case err != nil:
		t.Errorf("%s: %v", where, err)
		return false
	case want == nil:
		t.Errorf("%s: the case has neither rendered nor error", where)
		return false
	case got != *want:
		t.Errorf("%s:\n got %q\nwant %q", where, got, *want)
		return false
	}
	return true
}

// TestChatTemplateOracle renders every case of ../shared/oracles/chat-templates (the real
// Llama 3 and Qwen3 templates, rendered by transformers' Jinja2 and @huggingface/jinja) and
// compares byte for byte; then the cases the two references disagree on, against Python
// jinja2's result (transformers'), which this renderer follows (trim strips str.isspace()).
func TestChatTemplateOracle(t *testing.T) {
	root := oracles.Dir(t, "chat-templates")
	for _, name := range []string{"llama3", "qwen3"} {
		dir := filepath.Join(root, name)
		c := oracleChat(t, dir)
		var cases []chatCase
		readJSON(t, filepath.Join(dir, "cases.json"), &cases)
		if len(cases) == 0 {
			t.Fatalf("%s: no cases", name)
		}
		pass := 0
		for _, k := range cases {
			got, err := renderCase(c, k)
			if checkCase(t, name+"/"+k.Name, got, err, k.Rendered, k.Error) {
				pass++
			}
		}
		var dis []chatCase
		readJSON(t, filepath.Join(dir, "disagreements.json"), &dis)
		for _, k := range dis {
			if k.Python == nil {
				t.Fatalf("%s/%s: disagreement without python_jinja2", name, k.Name)
			}
			got, err := renderCase(c, k)
			if checkCase(t, name+"/"+k.Name+" (disagreement, Python jinja2's side)", got, err, k.Python.Rendered, k.Python.Error) {
				pass++
			}
		}
		t.Logf("%s: %d of %d cases (%d + %d disagreements) render identically", name, pass, len(cases)+len(dis), len(cases), len(dis))
	}
}

// TestChatTokenizerOracle renders through the oracle tokenizers' own tokenizer_config.json
// (the Chat API vkc run uses): the special tokens come from the config, and the end of turn
// is found by rendering.
func TestChatTokenizerOracle(t *testing.T) {
	root := oracles.Dir(t, "chat-templates")
	for _, c := range []struct{ name, eot string }{{"llama3", "<|eot_id|>"}, {"qwen3", "<|im_end|>"}} {
		tok, _ := oracleTokenizer(t, c.name)
		chat, err := tok.Chat()
		if err != nil {
			t.Fatal(err)
		}
		if chat.EndOfTurn != c.eot {
			t.Errorf("%s: end of turn %q, want %q", c.name, chat.EndOfTurn, c.eot)
		}
		var cases []chatCase
		readJSON(t, filepath.Join(root, c.name, "cases.json"), &cases)
		for _, k := range cases {
			got, err := renderCase(chat, k)
			checkCase(t, c.name+"/"+k.Name, got, err, k.Rendered, k.Error)
		}
	}
}

// TestEncodeChatBOS: the Llama 3 template writes <|begin_of_text|> itself and its tokenizer
// adds nothing, so it appears once; Llama 2's tokenizer adds <s>, which EncodeChat puts first
// when the rendered text does not start with it, and not twice when it does.
func TestEncodeChatBOS(t *testing.T) {
	l3, _ := oracleTokenizer(t, "llama3")
	chat, err := l3.Chat()
	if err != nil {
		t.Fatal(err)
	}
	text, err := chat.Render([]Message{{Role: "user", Content: "Hi"}}, ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := l3.EncodeChat(text)
	if err != nil {
		t.Fatal(err)
	}
	bos, _ := l3.ID("<|begin_of_text|>")
	n := 0
	for _, id := range ids {
		if id == bos {
			n++
		}
	}
	if len(ids) == 0 || ids[0] != bos || n != 1 {
		t.Errorf("llama3: ids %v: want one <|begin_of_text|> (%d), first", ids, bos)
	}
	l2, _ := oracleTokenizer(t, "llama2")
	for _, text := range []string{"[INST] Hi [/INST]", "<s>[INST] Hi [/INST]"} {
		ids, err := l2.EncodeChat(text)
		if err != nil {
			t.Fatal(err)
		}
		want, err := l2.Encode("[INST] Hi [/INST]", true) // <s> then the text
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(text, "<s>") {
			// "<s>" is matched as the special token; what follows is encoded as text after it.
			rest, _ := l2.Encode("[INST] Hi [/INST]", false)
			want = append([]int32{1}, rest...)
		}
		if !equalIDs(ids, want) {
			t.Errorf("llama2 %q: ids %v, want %v", text, ids, want)
		}
	}
}

// TestMessageJSON: a message object keeps its fields in order for the template (a tojson of
// the message writes them as given), a null or list content stays what it is, a message
// without content has none (the template's "is defined" says so), and MarshalJSON gives the
// object back.
func TestMessageJSON(t *testing.T) {
	src := `[{"content": null, "role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]},` +
		`{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "tool", "name": "f"}, {"role": "user", "content": "x"}]`
	var msgs []Message
	if err := json.Unmarshal([]byte(src), &msgs); err != nil {
		t.Fatal(err)
	}
	c, err := NewChat("t", "{% for m in messages %}{{ m|tojson }}|{{ m.content is defined }}|{{ m.content is none }}\n{% endfor %}", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Render(msgs, ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content": null, "role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]}|True|True` + "\n" +
		`{"role": "user", "content": [{"type": "text", "text": "hi"}]}|True|False` + "\n" +
		`{"role": "tool", "name": "f"}|False|False` + "\n" +
		`{"role": "user", "content": "x"}|True|False` + "\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	out, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	json.Unmarshal([]byte(src), &a)
	json.Unmarshal(out, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("marshal: %s\nwant the same as %s", out, src)
	}
	// A Go-built message has role and content, then its fields.
	m := Message{Role: "assistant", Content: "ok", Fields: []Field{{"reasoning_content", json.RawMessage(`"why"`)}}}
	if got, err := c.Render([]Message{m}, ChatOptions{}); err != nil || got != `{"role": "assistant", "content": "ok", "reasoning_content": "why"}|True|False`+"\n" {
		t.Errorf("Go message: %q, %v", got, err)
	}
	for _, bad := range []string{`[{"content": "x"}]`, `[{"role": 1}]`, `[["user", "x"]]`, `[{"role": "a", "role": "b"}]`} {
		if err := json.Unmarshal([]byte(bad), &msgs); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestNamedTemplates: a tokenizer_config.json with a list of named templates, and a GGUF file
// with tokenizer.chat_templates, render as transformers picks: "tool_use" when tools are
// given, else "default"; a name picks one; without a default and without tools it is an error
// naming the templates.
func TestNamedTemplates(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"chat_template": [{"name": "default", "template": "D{{ messages|length }}"}, {"name": "tool_use", "template": "T{{ tools|length }}"}, {"name": "rag", "template": "R{{ documents }}"}]}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	onlyNamed := filepath.Join(dir, "only")
	os.Mkdir(onlyNamed, 0o755)
	if err := os.WriteFile(filepath.Join(onlyNamed, "tokenizer_config.json"), []byte(`{"chat_template": [{"name": "tool_use", "template": "T"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var b gguf.Builder
	b.Add("tokenizer.ggml.model", gguf.MustValue("gpt2"))
	b.Add("tokenizer.ggml.tokens", gguf.MustValue([]string{"a"}))
	b.Add("tokenizer.chat_template", gguf.MustValue("D{{ messages|length }}"))
	b.Add("tokenizer.chat_templates", gguf.MustValue([]string{"tool_use", "rag"}))
	b.Add("tokenizer.chat_template.tool_use", gguf.MustValue("T{{ tools|length }}"))
	b.Add("tokenizer.chat_template.rag", gguf.MustValue("R{{ documents }}"))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	ggufPath := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(ggufPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "x"}}
	tools := json.RawMessage(`[{"type": "function"}, {"type": "function"}]`)
	for _, path := range []string{dir, ggufPath} {
		c, err := LoadChat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(c.Templates(), ","); got != "rag,tool_use" {
			t.Errorf("%s: templates %s", path, got)
		}
		for _, k := range []struct {
			opt  ChatOptions
			want string
		}{
			{ChatOptions{}, "D1"},
			{ChatOptions{Tools: tools}, "T2"},
			{ChatOptions{Kwargs: map[string]any{"tools": tools}}, "T2"},
			{ChatOptions{Kwargs: map[string]any{"tools": json.RawMessage("null")}}, "D1"},
			{ChatOptions{Template: "rag", Kwargs: map[string]any{"documents": "docs"}}, "Rdocs"},
			{ChatOptions{Template: "default", Tools: tools}, "D1"},
		} {
			if got, err := c.Render(msgs, k.opt); err != nil || got != k.want {
				t.Errorf("%s %+v: %q, %v; want %q", path, k.opt, got, err, k.want)
			}
		}
		if _, err := c.Render(msgs, ChatOptions{Template: "nope"}); err == nil || !strings.Contains(err.Error(), "default, rag, tool_use") {
			t.Errorf("%s: unknown name: %v", path, err)
		}
	}
	c, err := LoadChat(onlyNamed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Render(msgs, ChatOptions{}); err == nil || !strings.Contains(err.Error(), "tool_use") {
		t.Errorf("no default: %v", err)
	}
}
