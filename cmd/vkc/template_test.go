package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
)

// TestTemplateOracle runs vkc template on the oracle tokenizers' tokenizer_config.json files
// (the sources of ../shared/oracles/chat-templates) for every case of the chat-template oracle
// and compares stdout with the expected rendering byte for byte (no newline added).
func TestTemplateOracle(t *testing.T) {
	tokDir := tokenizerOracle(t)
	root := oracles.Dir(t, "chat-templates")
	dir := t.TempDir()
	n := 0
	for _, name := range []string{"llama3", "qwen3"} {
		data, err := os.ReadFile(filepath.Join(root, name, "cases.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cases []struct {
			Name     string          `json:"name"`
			Messages json.RawMessage `json:"messages"`
			Gen      bool            `json:"add_generation_prompt"`
			Kwargs   json.RawMessage `json:"kwargs"`
			Rendered string          `json:"rendered"`
		}
		if err := json.Unmarshal(data, &cases); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(tokDir, name, "tokenizer_config.json")
		for i, c := range cases {
			msgs := filepath.Join(dir, name+"-"+c.Name+".json")
			if err := os.WriteFile(msgs, c.Messages, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"template", cfg, "--messages", msgs, "--kwargs", string(c.Kwargs)}
			if c.Gen {
				args = append(args, "--add-generation-prompt")
			}
			if i%2 == 1 { // the folder form of PATH, flags first
				args = append([]string{"template", "--messages", msgs, "--kwargs", string(c.Kwargs)}, args[len(args)-1])
				if !c.Gen {
					args = args[:len(args)-1]
				}
				args = append(args, filepath.Join(tokDir, name))
			}
			code, out, errs := runCLI(t, args...)
			if code != 0 || out != c.Rendered {
				t.Errorf("%s/%s: vkc %s: exit %d, stderr %q\n got %q\nwant %q", name, c.Name, strings.Join(args, " "), code, errs, out, c.Rendered)
				continue
			}
			n++
		}
	}
	t.Logf("%d oracle cases printed exactly", n)
}

// TestTemplateGGUFAndErrors: a GGUF file's tokenizer.chat_template with its BOS and EOS tokens;
// the template's raise_exception message is the error, with the template's name and line; a
// syntax error names its line; bad arguments are usage errors.
func TestTemplateGGUFAndErrors(t *testing.T) {
	dir := t.TempDir()
	tmpl := "{{ bos_token }}{% for m in messages %}\n" +
		"{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Only user and assistant roles are supported, not ' + m.role) }}{% endif %}\n" +
		"[{{ m.role }}] {{ m.content | trim }}{{ eos_token if m.role == 'assistant' }}\n" +
		"{% endfor %}"
	var b gguf.Builder
	b.Add("tokenizer.ggml.model", gguf.MustValue("gpt2"))
	b.Add("tokenizer.ggml.pre", gguf.MustValue("gpt-2"))
	b.Add("tokenizer.ggml.tokens", gguf.MustValue([]string{"a", "<s>", "</s>"}))
	b.Add("tokenizer.ggml.bos_token_id", gguf.MustValue(uint32(1)))
	b.Add("tokenizer.ggml.eos_token_id", gguf.MustValue(uint32(2)))
	b.Add("tokenizer.chat_template", gguf.MustValue(tmpl))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `[{"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Hello"}]`)
	// trim_blocks removes the newline after each block tag; the output line's own newline stays.
	code, out, errs := runCLI(t, "template", path, "--messages", good)
	if want := "<s>[user] Hi\n[assistant] Hello</s>\n"; code != 0 || out != want {
		t.Errorf("gguf: exit %d, stderr %q, got %q, want %q", code, errs, out, want)
	}
	bad := write("bad.json", `[{"role": "system", "content": "x"}]`)
	code, out, errs = runCLI(t, "template", path, "--messages", bad)
	if code != 1 || out != "" || !strings.Contains(errs, "m.gguf tokenizer.chat_template:2: raise_exception: Only user and assistant roles are supported, not system") {
		t.Errorf("raise_exception: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	cfg := write("tokenizer_config.json", `{"chat_template": "{% for m in messages %}\n{{ m.content }\n{% endfor %}"}`)
	code, _, errs = runCLI(t, "template", cfg, "--messages", good)
	if code != 1 || !strings.Contains(errs, "tokenizer_config.json chat_template:2:") {
		t.Errorf("syntax error: exit %d, stderr %q", code, errs)
	}
	for _, args := range [][]string{
		{"template", path},
		{"template", "--messages", good},
		{"template", path, "--messages", good, "--kwargs", "[1]"},
	} {
		if code, _, errs := runCLI(t, args...); code != 2 {
			t.Errorf("vkc %s: exit %d, stderr %q; want a usage error", strings.Join(args, " "), code, errs)
		}
	}
	if code, _, errs := runCLI(t, "template", path, "--messages", write("notlist.json", `{"role": "user"}`)); code != 1 || !strings.Contains(errs, "notlist.json") {
		t.Errorf("messages not a list: exit %d, stderr %q", code, errs)
	}
}
