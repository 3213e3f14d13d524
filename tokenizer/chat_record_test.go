package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/plan"
)

// TestChatTemplateRecorded: a plan records the whole chat template (Qwen3's, 4 KiB, byte for
// byte) and the special tokens it needs (the inline tokenizer_config.json), so the tokenizer a
// plan gives back renders every oracle conversation as the source folder does. The
// tokenizer.json beside Qwen3's config is a small stand-in (the vocabulary plays no part).
func TestChatTemplateRecorded(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join(oracles.Dir(t, "tokenizers"), "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(oracles.Dir(t, "chat-templates"), "qwen3", "template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tj := `{"model": {"type": "WordLevel", "vocab": {"<|im_end|>": 0, "<|endoftext|>": 1, "<unk>": 2}, "unk_token": "<unk>"}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := Record(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ChatTemplate != string(src) {
		t.Fatalf("recorded template of %d bytes, want the source's %d bytes exactly", len(rec.ChatTemplate), len(src))
	}
	p := &plan.Plan{Tokenizer: rec}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := plan.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromPlan(back.Tokenizer, filepath.Join(t.TempDir(), "x.plan"))
	if err != nil {
		t.Fatal(err)
	}
	chat, err := tok.Chat()
	if err != nil {
		t.Fatal(err)
	}
	var cases []chatCase
	readJSON(t, filepath.Join(oracles.Dir(t, "chat-templates"), "qwen3", "cases.json"), &cases)
	for _, k := range cases {
		got, err := renderCase(chat, k)
		checkCase(t, "from the plan: qwen3/"+k.Name, got, err, k.Rendered, k.Error)
	}
}
