package vkc

import (
	"sort"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/lower"
)

// TestGGUFQuantTypes imports the tiny llama files of the Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4
// oracle (internal/oracles.QuantTiny: the committed mixed file, every weight in one of the five
// formats, and the per-type files of llama.cpp's mixes when scripts/oracles/quant-models.sh has
// made them), runs them in the interpreter and, compiled, on the device (lavapipe in CI). Kernels
// read every format's blocks as the file stores them (no compile-time dequantization) and
// dequantize exactly, so with everything in f32 (importer.F32) both match the float64 reference
// to 1e-4 row-relative (the shared oracle's tolerance (1)) and its greedy tokens, and llama.cpp's
// own logits to twice llama.cpp's measured error against that reference (the file's tolerance
// (2): 0.053 to 0.08); with the import's defaults (an f16 KV cache, f16 activations into the
// prefill's products) the interpreter is within tolerance (2) of both.
func TestGGUFQuantTypes(t *testing.T) {
	d := device(t)
	for _, name := range oracles.QuantTinyNames {
		t.Run(name, func(t *testing.T) {
			path, gold, o := oracles.QuantTiny(t, name)
			dir := t.TempDir()
			def, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32})
			if err != nil {
				t.Fatal(err)
			}
			t.Log("interpreter, defaults:")
			oracles.CheckLlamaCppFile(t, oracles.LlamaCppFile{Tol2: o.Tol2, GreedyAgree: o.GreedyAgree}, oracles.RunLlamaCpp(t, oracles.Interp(def.Model), gold), gold, o.Tol2)
			im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 32, YAMLDir: dir, Precision: importer.F32})
			if err != nil {
				t.Fatal(err)
			}
			m := parseImported(t, dir, im.YAML)
			// The model's weights have the file's types (the generator's list, ggml's names).
			want := map[string]bool{}
			for _, ty := range o.Types {
				if ty != "F32" {
					want[strings.ToLower(ty)] = true
				}
			}
			got := map[string]bool{}
			for _, prm := range m.Params {
				if prm.Type.DType.Quantized() {
					got[prm.Type.DType.String()] = true
				}
			}
			if g, w := keys(got), keys(want); g != w {
				t.Fatalf("weights of types %s, the file has %s", g, w)
			}
			t.Logf("weight types %s", keys(got))

			run := oracles.RunLlamaCpp(t, oracles.Interp(m), gold)
			t.Log("interpreter:")
			oracles.CheckLlamaCppFile(t, oracles.LlamaCppFile{Tol2: o.Tol2, GreedyAgree: o.GreedyAgree}, run, gold, oracles.LlamaCppRefTol)

			p, _ := compileExample(t, m, Options{Target: targetOf(d)})
			if notes := strings.Join(p.Record.Notes, "\n"); strings.Contains(notes, lower.DequantNotePrefix) {
				t.Errorf("weights dequantized at compile time: %s", notes)
			}
			var sum strings.Builder
			if err := p.Summary(&sum); err != nil {
				t.Fatal(err)
			}
			for ty := range got {
				if !strings.Contains(sum.String(), ", "+ty+" ") {
					t.Errorf("the plan summary (vkc inspect) lacks the bytes of %s weights:\n%.800s", ty, sum.String())
				}
			}
			t.Log("plan:")
			run = oracles.RunLlamaCpp(t, &planRunner{roundTrip(t, d, p)}, gold)
			oracles.CheckLlamaCppFile(t, oracles.LlamaCppFile{Tol2: o.Tol2, GreedyAgree: o.GreedyAgree}, run, gold, oracles.LlamaCppRefTol)
		})
	}
}

func keys(m map[string]bool) string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return strings.Join(k, " ")
}
