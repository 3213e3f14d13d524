package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/plan"
)

// roundTripPlan puts rec in a plan, encodes and decodes it, and returns the decoded record.
func roundTripPlan(t *testing.T, rec *plan.Tokenizer) *plan.Tokenizer {
	t.Helper()
	p := &plan.Plan{Tokenizer: rec}
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := plan.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return q.Tokenizer
}

func sameIDsOnCorpus(t *testing.T, name string, tk *Tokenizer) {
	t.Helper()
	want, g := oracleTokenizer(t, name)
	for i, c := range g.Cases {
		for _, special := range []bool{false, true} {
			a, err1 := tk.Encode(c.Text, special)
			b, err2 := want.Encode(c.Text, special)
			if err := firstErr(err1, err2); err != nil || !equalIDs(a, b) {
				t.Fatalf("case %d (special %v): %v vs %v (%v)", i, special, a, b, err)
			}
		}
	}
}

func TestRecordInlineAndReference(t *testing.T) {
	// Llama 2's files (the smallest), with a chat template added to its tokenizer_config.json.
	src := filepath.Join(oracleDir(t), "llama2")
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
	var cfg map[string]any
	data, _ = os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), mustJSON(cfg), 0o644)
	for _, ref := range []bool{false, true} {
		rec, err := Record(dir, ref)
		if err != nil {
			t.Fatal(err)
		}
		if rec.BOS != 1 || rec.EOS != 2 || !strings.Contains(rec.ChatTemplate, "[INST]") || rec.Config == nil {
			t.Fatalf("record: BOS %d, EOS %d, config %d bytes, template %.40q", rec.BOS, rec.EOS, len(rec.Config), rec.ChatTemplate)
		}
		if (rec.Ref != nil) != ref || (rec.Data != nil) == ref {
			t.Fatalf("ref %v: record has data %d bytes, ref %v", ref, len(rec.Data), rec.Ref)
		}
		got := roundTripPlan(t, rec)
		tk, err := FromPlan(got, filepath.Join(t.TempDir(), "x.plan"))
		if err != nil {
			t.Fatal(err)
		}
		sameIDsOnCorpus(t, "llama2", tk)
		if tk.BOS() != 1 || tk.EOS() != 2 || tk.ChatTemplate() != rec.ChatTemplate {
			t.Errorf("rebuilt tokenizer: BOS %d, EOS %d", tk.BOS(), tk.EOS())
		}
	}
	// A referenced file that changed is refused, naming it.
	rec, err := Record(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(dir, "tokenizer.json"), os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte(" "))
	f.Close()
	if _, err := FromPlan(rec, "m.plan"); err == nil || !strings.Contains(err.Error(), "tokenizer.json has changed since the plan was compiled") {
		t.Errorf("changed file: %v", err)
	}
	if _, err := FromBytes("sentencepiece", nil, nil); err == nil || !strings.Contains(err.Error(), `format "sentencepiece" is not one`) {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := FromPlan(nil, "m.plan"); err == nil || !strings.Contains(err.Error(), "m.plan: the plan records no tokenizer") {
		t.Errorf("no tokenizer: %v", err)
	}
}

// TestRecordGGUF: a GGUF file's vocabulary is recorded without its tensors.
func TestRecordGGUF(t *testing.T) {
	v := convertedVocab(t, "llama2")
	var b gguf.Builder
	b.Add("general.architecture", gguf.MustValue("llama"))
	b.Add("tokenizer.ggml.model", gguf.MustValue(v.Model))
	b.Add("tokenizer.ggml.tokens", gguf.MustValue(v.Tokens))
	b.Add("tokenizer.ggml.scores", gguf.MustValue(v.Scores))
	types := make([]int32, len(v.Types))
	for i, ty := range v.Types {
		types[i] = int32(ty)
	}
	b.Add("tokenizer.ggml.token_type", gguf.MustValue(types))
	b.Add("tokenizer.ggml.bos_token_id", gguf.MustValue(uint32(1)))
	b.Add("tokenizer.ggml.eos_token_id", gguf.MustValue(uint32(2)))
	b.Add("tokenizer.ggml.unknown_token_id", gguf.MustValue(uint32(0)))
	b.Tensor("token_embd.weight", 0, []uint64{4096, 64}, make([]byte, 4096*64*4)) // f32, 1 MiB
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	os.WriteFile(path, data, 0o644)
	rec, err := Record(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Format != plan.TokenizerGGUF || len(rec.Data) >= len(data)-4096*64*4 || rec.BOS != 1 || rec.EOS != 2 {
		t.Fatalf("record: format %q, %d bytes of a %d-byte file, BOS %d, EOS %d", rec.Format, len(rec.Data), len(data), rec.BOS, rec.EOS)
	}
	tk, err := FromPlan(roundTripPlan(t, rec), "m.plan")
	if err != nil {
		t.Fatal(err)
	}
	sameIDsOnCorpus(t, "llama2", tk)
}
