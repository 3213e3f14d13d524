package vkc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/tokenizer"
)

// TestCompileRecordsTokenizer: Options.Tokenizer puts the tokenizer into the plan, which the
// plan file carries and tokenizer.FromPlan rebuilds (checked on the oracle's "Hello world").
func TestCompileRecordsTokenizer(t *testing.T) {
	dir := oracles.Dir(t, "tokenizers")
	// tinyllama's graph with Llama 2's vocabulary of 32000 (random weights): a tokenizer with
	// more ids than the model's logits cover is refused (TestCompileRefusesForeignTokenizer).
	src, err := os.ReadFile("examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	inWeights := false
	for _, l := range strings.Split(strings.Replace(string(src), "vocab: 256", "vocab: 32000", 1), "\n") {
		switch {
		case l == "weights:":
			inWeights = true
			lines = append(lines, "weights: {init: random, seed: 1}")
			continue
		case inWeights && strings.HasPrefix(l, " "):
			continue
		}
		inWeights = false
		lines = append(lines, l)
	}
	m, err := ir.ParseModelBytes("tinyllama-32k.yaml", []byte(strings.Join(lines, "\n")), "examples/tinyllama")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := compileExample(t, m, Options{Target: &LavapipeTarget, Tokenizer: filepath.Join(dir, "llama2")})
	if p.Tokenizer == nil || p.Tokenizer.Format != plan.TokenizerJSON || p.Tokenizer.BOS != 1 || p.Tokenizer.EOS != 2 {
		t.Fatalf("plan tokenizer: %+v", p.Tokenizer)
	}
	path := filepath.Join(t.TempDir(), "tiny.plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	q, err := plan.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromPlan(q.Tokenizer, path)
	if err != nil {
		t.Fatal(err)
	}
	// The oracle's README: "Hello world" → [1, 22557, 1526] for this vocabulary.
	if ids, err := tk.Encode("Hello world", true); err != nil || len(ids) != 3 || ids[0] != 1 || ids[1] != 22557 || ids[2] != 1526 {
		t.Errorf("Hello world: %v, %v", ids, err)
	}
	// A tokenizer that does not load fails the compile before anything is lowered.
	_, _, err = Compile(context.Background(), m, Options{Target: &LavapipeTarget, Tokenizer: filepath.Join(t.TempDir(), "none.json")})
	if err == nil || !strings.Contains(err.Error(), "compile tinyllama: tokenizer:") || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("missing tokenizer: %v", err)
	}
}

// TestCompileRefusesForeignTokenizer: a tokenizer that knows ids beyond the model's logits
// (Llama 2's 32000 for tinyllama's 256) is refused before anything is lowered, naming both.
func TestCompileRefusesForeignTokenizer(t *testing.T) {
	dir := oracles.Dir(t, "tokenizers")
	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Compile(context.Background(), m, Options{Target: &LavapipeTarget, Tokenizer: filepath.Join(dir, "llama2")})
	if err == nil || !strings.Contains(err.Error(), "has ids up to 31999, but the model's logits cover 256 tokens") {
		t.Errorf("Llama 2's tokenizer for tinyllama: %v", err)
	}
}
