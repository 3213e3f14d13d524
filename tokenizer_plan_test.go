package vkc

import (
	"context"
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
	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
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
