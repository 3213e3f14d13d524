package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hfFolder makes a folder with the oracle tokenizer NAME's tokenizer.json and
// tokenizer_config.json (linked, not copied) and the given other files.
func hfFolder(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := os.Symlink(filepath.Join(oracleDir(t), name, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	for f, text := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestEOGFromHFConfig: a Hugging Face folder's config.json and generation_config.json name the
// ids that end a generation, an id or a list (Meta-Llama-3-8B-Instruct's: 128009, and
// [128001, 128009]; Qwen3's 151645, and [151645, 151643]); every one of them, with
// tokenizer_config.json's EOS first, is an end of generation, and a plan records them.
func TestEOGFromHFConfig(t *testing.T) {
	for _, c := range []struct {
		name, config, generation string
		want                     []string
	}{
		{"llama3", `{"eos_token_id": 128009}`, `{"eos_token_id": [128001, 128009]}`, []string{"<|end_of_text|>", "<|eot_id|>"}},
		{"qwen3", `{"eos_token_id": 151645}`, `{"eos_token_id": [151645, 151643]}`, []string{"<|im_end|>", "<|endoftext|>"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := hfFolder(t, c.name, map[string]string{"config.json": c.config, "generation_config.json": c.generation})
			tk, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, id := range tk.EOG() {
				s, _ := tk.Token(id)
				got = append(got, s)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("end-of-generation tokens %q (ids %v), want %q", got, tk.EOG(), c.want)
			}
			rec, err := Record(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			back, err := FromPlan(rec, "x.plan")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back.EOG(), tk.EOG()) {
				t.Errorf("from the plan's record: %v, want %v", back.EOG(), tk.EOG())
			}
		})
	}
	// Without the config files only EOS ends a generation.
	tk, err := Load(hfFolder(t, "llama3", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EOG(); !slices.Equal(got, []int32{128001}) {
		t.Errorf("without config.json: %v, want [128001]", got)
	}
}

// TestEOGConfigErrors: an eos_token_id that is not an id or a list of ids, or names an id the
// tokenizer does not have, is an error naming the file.
func TestEOGConfigErrors(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{`{"eos_token_id": "</s>"}`, `config.json: eos_token_id is "</s>"; want a token id or a list of them`},
		{`{"eos_token_id": [1, -2]}`, "config.json: eos_token_id -2 is negative"},
		{`{"eos_token_id": [128001, 300000]}`, "config.json: eos_token_id 300000 is outside the tokenizer's"},
		{`{"eos_token_id": 1.5}`, "want a token id"},
	} {
		_, err := Load(hfFolder(t, "llama3", map[string]string{"config.json": c.config}))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.config, err, c.want)
		}
	}
	if _, err := Load(hfFolder(t, "llama3", map[string]string{"config.json": `{"eos_token_id": null}`})); err != nil {
		t.Errorf("eos_token_id null: %v", err)
	}
}

// TestEOGFromGGUF: a GGUF vocabulary's tokenizer.ggml.eot_token_id (and eom_token_id) end a
// generation besides its EOS, and one outside the vocabulary is refused.
func TestEOGFromGGUF(t *testing.T) {
	v := convertedVocab(t, "qwen3")
	v.EOS, v.EOG = 151643, []int32{151645} // <|endoftext|>, and <|im_end|> as the end of turn
	path := filepath.Join(t.TempDir(), "qwen3.gguf")
	writeVocabGGUF(t, path, v)
	tk, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EOG(); !slices.Equal(got, []int32{151643, 151645}) {
		t.Errorf("EOG %v, want [151643 151645]", got)
	}
	rec, err := Record(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := FromPlan(rec, "x.plan"); err != nil || !slices.Equal(back.EOG(), tk.EOG()) {
		t.Errorf("from the plan's record: %v (%v)", back.EOG(), err)
	}
	v.EOG = []int32{int32(len(v.Tokens))}
	writeVocabGGUF(t, path, v)
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "tokenizer.ggml.eot_token_id") {
		t.Errorf("an EOT outside the vocabulary: %v", err)
	}
}
