package importer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
)

// TestMixtralAgainstLlamaCpp imports the Mixtral-style model (GGUF arch llama with experts) and
// runs it through the interpreter: prefill and decode logits (llama.cpp's greedy tokens fed)
// against llama.cpp's CPU backend's, and the greedy tokens. The same model with the RoPE of
// another convention, or with the chosen experts' weights not renormalised, is checked to miss
// llama.cpp's logits by far more than the tolerance, so the comparison can tell them apart.
func TestMixtralAgainstLlamaCpp(t *testing.T) {
	path, gold := oracles.MixtralFile(t)
	im, err := importer.ImportGGUF(path, importer.GGUFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	y := string(im.YAML)
	for _, want := range []string{"mode=interleaved", "moe_route(linear(h, layers.{i}.router), k=experts_used, norm=renorm)", "experts: 4", "ffn_exp: 128"} {
		if !strings.Contains(y, want) {
			t.Errorf("the model.yaml lacks %q", want)
		}
	}
	oracles.CheckMixtral(t, oracles.RunLlamaCpp(t, oracles.Interp(im.Model), gold), gold)

	vocab := gold["prefill_logits"].Type.Shape[1]
	for _, v := range []struct{ what, from, to string }{
		{"rotate-half RoPE", "mode=interleaved", "mode=half"},
		{"weights not renormalised", "norm=renorm", "norm=none"},
	} {
		m, err := ir.ParseModelBytes(path, []byte(strings.ReplaceAll(y, v.from, v.to)), filepath.Dir(path))
		if err != nil {
			t.Fatalf("%s: %v", v.what, err)
		}
		run := oracles.RunLlamaCpp(t, oracles.Interp(m), gold)
		if e := oracles.RowRel(run.Prefill, gold["prefill_logits"].Float64s(), vocab); e < 10*oracles.MixtralTol {
			t.Errorf("with %s the prefill logits are only %.3g row-relative from llama.cpp's: the comparison cannot tell", v.what, e)
		} else {
			t.Logf("with %s: %.2g row-relative from llama.cpp's", v.what, e)
		}
	}
}
