package vkc

import (
	"fmt"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/tokenizer"
)

// modelVocab is the number of tokens a language model's logits cover (the last dimension of
// its functions' "logits" output), or 0 when it has none.
func modelVocab(m *ir.Model) int {
	for _, f := range m.Functions {
		for _, o := range f.Outputs {
			if s := o.Value.Type().Shape; o.Name == "logits" && len(s) > 0 {
				return s[len(s)-1]
			}
		}
	}
	return 0
}

// checkTokenizerVocab refuses a tokenizer that knows ids the model has no logits (and no
// embedding row) for: a prompt would hold ids the plan refuses at run time, and every
// generated token would be decoded by the wrong table. A model whose vocabulary is larger
// than its tokenizer's (padded for the kernels, as Qwen's) is fine.
func checkTokenizerVocab(m *ir.Model, rec *plan.Tokenizer, name string) error {
	v := modelVocab(m)
	if rec == nil || v == 0 {
		return nil
	}
	t, err := tokenizer.FromPlan(rec, "")
	if err != nil {
		return nil // recorded by reference to a file read later; run checks its ids
	}
	if n := t.VocabSize(); n > v {
		return fmt.Errorf("the tokenizer %s has ids up to %d, but the model's logits cover %d tokens: it is not this model's tokenizer", name, n-1, v)
	}
	return nil
}

// tokenizerNote says, for a language model whose plan records no tokenizer although none was
// refused (--tokenizer none), why, and what text generation will need.
func tokenizerNote(m *ir.Model, rec *plan.Tokenizer, opts Options) string {
	if rec != nil || opts.Tokenizer == NoTokenizer || modelVocab(m) == 0 {
		return ""
	}
	why := "the model names no tokenizer"
	if importer.IsGGUFPath(m.Source) {
		if s := importer.GGUFVocabulary(m.Source); s != "" {
			return s
		}
	}
	return why + ": the plan records none; text generation needs one (--tokenizer FILE)"
}
