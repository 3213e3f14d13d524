package oracles

import (
	"path/filepath"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

// LlamaCppKVFile is one row of testdata/llamacpp-kv/README.md: llama.cpp's logits for a file of
// the llama.cpp oracle with a block-quantized KV cache (-ctk/-ctv TYPE), and the tolerance
// ("tolerance (2)" as that oracle's README makes it: twice the larger of llama.cpp's prefill and
// decode error against the float64 reference).
type LlamaCppKVFile struct {
	Name string // the llama.cpp oracle file, MODEL/MODEL-TYPE
	KV   string // the cache type: q8_0, q4_0
	Tol2 float64
}

// LlamaCppKVFiles are the shipped rows.
var LlamaCppKVFiles = []LlamaCppKVFile{
	{"llama-tiny/llama-tiny-F16", "q8_0", 0.051},
	{"llama-tiny/llama-tiny-F16", "q4_0", 0.57},
	{"qwen3-tiny/qwen3-tiny-Q8_0", "q8_0", 0.075},
}

// LlamaCppKV returns llama.cpp's prefill and decode logits of f (testdata/llamacpp-kv, stored as
// f16), or fails.
func LlamaCppKV(t testing.TB, f LlamaCppKVFile) (prefill, decode []float64) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.ReadSafetensors(filepath.Join(root, "testdata", "llamacpp-kv", filepath.Base(f.Name)+".kv.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	p, d := g["prefill_logits_"+f.KV], g["decode_logits_"+f.KV]
	if p == nil || d == nil {
		t.Fatalf("testdata/llamacpp-kv: no logits of %s with a %s cache", f.Name, f.KV)
	}
	return p.Float64s(), d.Float64s()
}

// CheckLlamaCppKV compares a run of a model with f's KV cache type with llama.cpp's logits
// with that cache and with the float64 reference (which has no cache quantization), both
// within f.Tol2.
func CheckLlamaCppKV(t testing.TB, f LlamaCppKVFile, run LlamaCppRun, gold map[string]*ir.Tensor) {
	t.Helper()
	pre, dec := LlamaCppKV(t, f)
	vocab := gold["prefill_logits"].Type.Shape[1]
	for _, c := range []struct {
		what      string
		got, llcp []float64
		ref       string
	}{{"prefill", run.Prefill, pre, "ref_prefill_logits"}, {"decode", run.Decode, dec, "ref_decode_logits"}} {
		el := RowRel(c.got, c.llcp, vocab)
		e := RowRel(c.got, gold[c.ref].Float64s(), vocab)
		t.Logf("%s, %s cache: row-relative error %.2g against llama.cpp's with that cache, %.2g against the reference (tolerance %g)", c.what, f.KV, el, e, f.Tol2)
		if el > f.Tol2 || e > f.Tol2 {
			t.Errorf("%s, %s cache: row-relative error %.3g against llama.cpp, %.3g against the reference: beyond %g", c.what, f.KV, el, e, f.Tol2)
		}
	}
}
