package importer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/tokenizer"
)

// tinyllamaWith makes a Hugging Face folder of the oracle tinyllama (its weights linked) whose
// config.json has eos_token_id set to eos (raw JSON), with testdata/chat-tiny's tokenizer.
func tinyllamaWith(t *testing.T, eos string) string {
	t.Helper()
	src := oracles.Dir(t, "hf/tinyllama")
	b, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["eos_token_id"] = json.RawMessage(eos)
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"weights.safetensors": filepath.Join(src, "weights.safetensors")}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		abs, err := filepath.Abs(filepath.Join("../testdata/chat-tiny", f))
		if err != nil {
			t.Fatal(err)
		}
		links[f] = abs
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestHFEOSList: config.json's eos_token_id as a list (as Llama 3's) is read, not reported as
// unused: the import says generation stops at each, and the tokenizer the plan records ends a
// generation at every one of them besides tokenizer_config.json's EOS (<|im_end|>, 257). A value
// that is neither an id nor a list of ids is an error naming the field.
func TestHFEOSList(t *testing.T) {
	dir := tinyllamaWith(t, "[2, 3]")
	im, err := importer.ImportHF(dir, importer.HFOptions{YAMLDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer im.Model.Close()
	if !slices.Contains(im.Used, "eos_token_id") || slices.Contains(im.Ignored, "eos_token_id") {
		t.Errorf("eos_token_id is not among the used fields %v (ignored %v)", im.Used, im.Ignored)
	}
	if notes := strings.Join(im.Notes, "\n"); !strings.Contains(notes, "eos_token_id [2 3]: generation stops at each") {
		t.Errorf("notes do not say the end ids are used:\n%s", notes)
	}
	tk, err := tokenizer.Load(im.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EOG(); !slices.Equal(got, []int32{257, 2, 3}) {
		t.Errorf("end-of-generation ids %v, want [257 2 3]", got)
	}
	if _, err := importer.ImportHF(tinyllamaWith(t, `"end"`), importer.HFOptions{YAMLDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), `config.json: eos_token_id is "end"; want a token id or a list of them`) {
		t.Errorf("eos_token_id \"end\": %v", err)
	}
}
