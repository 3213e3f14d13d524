package kernels_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
)

type attnCase struct {
	sq, hq, skv, hkv, d, dv int
	dt                      ir.DType
	kvt                     ir.DType // k's and v's dtype when it differs from q's (a KV cache)
	attrs                   ir.Attrs
	kvLen                   int // 0: no kv_len operand
	residual                bool
	// every: run every configuration of the test, not only the default. Lavapipe compiles
	// an attention kernel in about a second and every case is a new kernel (shapes are
	// constants), so the non-default points run on a few cases only.
	every bool
}

func (c attnCase) name() string {
	kv := ""
	if c.kvt != 0 {
		kv = "_kv_" + c.kvt.String()
	}
	return fmt.Sprintf("sq%d_h%d/%d_skv%d_d%d/%d_%s%s_%s_kv%d", c.sq, c.hq, c.hkv, c.skv, c.d, c.dv, c.dt, kv, c.attrs.Key(), c.kvLen)
}

func (c attnCase) problem(t testing.TB) (*kernels.Problem, []*ir.Tensor) {
	rng := rand.New(rand.NewSource(int64(c.sq*1000 + c.skv)))
	// each operand in its own layout (layout, k_layout, v_layout)
	lay := ir.AttentionLayouts(c.attrs)
	shape := func(dt ir.DType, l string, s, h, f int) ir.Type {
		return ir.Type{DType: dt, Shape: ir.LayoutShape(l, s, h, f)}
	}
	kvt := c.dt
	if c.kvt != 0 {
		kvt = c.kvt
	}
	args := []ir.Type{shape(c.dt, lay.Q, c.sq, c.hq, c.d), shape(kvt, lay.K, c.skv, c.hkv, c.d), shape(kvt, lay.V, c.skv, c.hkv, c.dv)}
	vals := []*ir.Tensor{kerneltest.Random(rng, args[0]), kerneltest.Random(rng, args[1]), kerneltest.Random(rng, args[2])}
	if c.kvLen > 0 {
		args = append(args, ir.T(ir.I32))
		vals = append(vals, ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(c.kvLen)}))
	}
	p := opProblem(t, ir.Attention, c.attrs, args...)
	if c.residual {
		p = withResidual(p)
		vals = append(vals, kerneltest.Random(rng, p.Args[len(p.Args)-1]))
	}
	return p, vals
}

func attnCases() []attnCase {
	f32, f16 := ir.F32, ir.F16
	return []attnCase{
		// prefill
		{sq: 7, hq: 9, skv: 7, hkv: 3, d: 12, dv: 12, dt: f32, attrs: ir.Attrs{"causal": true}},
		{sq: 5, hq: 3, skv: 37, hkv: 3, d: 6, dv: 5, dt: f32, attrs: ir.Attrs{"causal": true, "window": 6, "layout": "hsd"}, kvLen: 20, every: true},
		{sq: 37, hq: 2, skv: 37, hkv: 1, d: 8, dv: 8, dt: f16, attrs: ir.Attrs{"causal": true}, residual: true, every: true},
		{sq: 4, hq: 4, skv: 67, hkv: 2, d: 16, dv: 16, dt: f16, attrs: ir.Attrs{"scale": 0.3}, kvLen: 30},
		// Gemma's local layers: a window shorter than the prompt and the cache (shd, as models run)
		{sq: 12, hq: 4, skv: 40, hkv: 2, d: 8, dv: 8, dt: f32, attrs: ir.Attrs{"causal": true, "window": 5}, kvLen: 30},
		// decode
		{sq: 1, hq: 9, skv: 67, hkv: 3, d: 16, dv: 16, dt: f32, attrs: ir.Attrs{"causal": true}, kvLen: 50, every: true},
		{sq: 1, hq: 9, skv: 67, hkv: 3, d: 16, dv: 16, dt: f32, attrs: ir.Attrs{"causal": true}, kvLen: 5, every: true},
		{sq: 2, hq: 6, skv: 67, hkv: 2, d: 8, dv: 8, dt: f16, attrs: ir.Attrs{"causal": true, "window": 10, "layout": "hsd"}, kvLen: 40},
		{sq: 1, hq: 3, skv: 37, hkv: 1, d: 5, dv: 7, dt: f32, attrs: nil, residual: true},
		// a decode step of a local layer: the last 8 of 50 keys of a 67-row cache; and a cache
		// that holds fewer keys than the window
		{sq: 1, hq: 4, skv: 67, hkv: 2, d: 16, dv: 16, dt: f32, attrs: ir.Attrs{"causal": true, "window": 8}, kvLen: 50, every: true},
		{sq: 1, hq: 4, skv: 67, hkv: 2, d: 16, dv: 16, dt: f32, attrs: ir.Attrs{"causal": true, "window": 8}, kvLen: 5},
		// f32 queries over an f16 KV cache (an imported model's decode), and prefill's f16 ones
		{sq: 1, hq: 9, skv: 67, hkv: 3, d: 16, dv: 16, dt: f32, kvt: f16, attrs: ir.Attrs{"causal": true}, kvLen: 50},
		{sq: 9, hq: 4, skv: 37, hkv: 2, d: 8, dv: 8, dt: f32, kvt: f16, attrs: ir.Attrs{"causal": true}, kvLen: 20},
		// a block-quantized KV cache (--kv q8_0, q4_0): decode, and a prefill block
		{sq: 1, hq: 2, skv: 40, hkv: 1, d: 32, dv: 32, dt: f32, kvt: ir.Q8_0, attrs: ir.Attrs{"causal": true}, kvLen: 29},
		{sq: 6, hq: 4, skv: 40, hkv: 2, d: 32, dv: 32, dt: f16, kvt: ir.Q4_0, attrs: ir.Attrs{"causal": true}, kvLen: 17},
		// Per-operand layouts (each operand read by its own strides): q from a projection (shd)
		// over a heads-first cache (hsd), q heads-first over K transposed (hds, keys contiguous)
		// and a sequence-first V, and decode over K transposed at d = 6 (features loaded one by
		// one; every configuration, so the key-fastest tile is checked at two block_k).
		{sq: 7, hq: 4, skv: 23, hkv: 2, d: 8, dv: 12, dt: f32, attrs: ir.Attrs{"causal": true, "k_layout": "hsd", "v_layout": "hsd"}, kvLen: 19},
		{sq: 6, hq: 6, skv: 21, hkv: 3, d: 12, dv: 8, dt: f16, attrs: ir.Attrs{"layout": "hsd", "k_layout": "hds", "v_layout": "shd", "scale": 0.4}},
		{sq: 1, hq: 4, skv: 37, hkv: 2, d: 6, dv: 8, dt: f32, attrs: ir.Attrs{"causal": true, "window": 9, "k_layout": "hds", "v_layout": "hsd"}, kvLen: 30, every: true},
	}
}

// TestAttentionLayoutRefusals: the combinations a template cannot read are refused with the
// reason, not built wrong: K transposed from a block-quantized cache (blocks run along the
// features) by the pass templates, and K transposed by the cooperative one on any device.
func TestAttentionLayoutRefusals(t *testing.T) {
	q8 := attnCase{sq: 1, hq: 2, skv: 64, hkv: 1, d: 32, dv: 32, dt: ir.F32, kvt: ir.Q8_0, attrs: ir.Attrs{"causal": true, "k_layout": "hds"}, kvLen: 29}
	p, _ := q8.problem(t)
	for _, tm := range []*kernels.Template{kernels.AttentionFlash, kernels.AttentionSplit} {
		if err := tm.Accepts(p, kernels.Lavapipe); err == nil || !strings.Contains(err.Error(), "hds") {
			t.Errorf("%s on %s: got %v, want a refusal naming hds", tm.Name, p.Key(), err)
		}
	}
	kt := attnCase{sq: 20, hq: 4, skv: 67, hkv: 2, d: 16, dv: 32, dt: ir.F16, attrs: ir.Attrs{"k_layout": "hds"}, kvLen: 30}
	p, _ = kt.problem(t)
	if err := kernels.AttentionCoop.Accepts(p, kernels.H200); err == nil || !strings.Contains(err.Error(), "hds") {
		t.Errorf("attention_coop on %s: got %v, want a refusal naming hds", p.Key(), err)
	}
	// The same problem with K heads-first is accepted (the refusal is about the layout).
	kt.attrs = ir.Attrs{"k_layout": "hsd"}
	p, _ = kt.problem(t)
	if err := kernels.AttentionCoop.Accepts(p, kernels.H200); err != nil {
		t.Errorf("attention_coop on %s: %v", p.Key(), err)
	}
}

func runAttnCases(t *testing.T, tmpl *kernels.Template, configs []kernels.Config) {
	for _, c := range attnCases() {
		if tmpl == kernels.AttentionSplit && c.sq > 5 {
			continue
		}
		p, vals := c.problem(t)
		if err := tmpl.Accepts(p, kernels.Lavapipe); err != nil {
			continue
		}
		t.Run(c.name(), func(t *testing.T) {
			for ci, cfg := range configs {
				if ci > 0 && !c.every {
					break
				}
				if cfg != nil && tmpl.Space.Valid(p, cfg, kernels.Lavapipe) != nil {
					continue
				}
				kerneltest.Check(t, tmpl, p, cfg, vals)
			}
		})
	}
}

func TestAttentionFlash(t *testing.T) {
	runAttnCases(t, kernels.AttentionFlash, []kernels.Config{nil, {"block_r": 16, "block_k": 16, "wg": 64}})
}

// TestAttentionFlashStagingForms: with several key tiles a workgroup loads the next K and V tiles
// during this tile's work on a GPU, and stages each at the top of its step on a CPU
// implementation (Caps.CPU: an invocation's loads run in order there anyway, and the copy of the
// loads cost lavapipe a quarter of the kernel's compile). Each test device runs its own form
// through TestAttentionFlash; here both run on whichever device there is, with key tiles of 8
// (several per workgroup) in the layouts and cache types whose loads differ.
func TestAttentionFlashStagingForms(t *testing.T) {
	cfg := kernels.Config{"block_r": 16, "block_k": 8, "wg": 64}
	for _, c := range []attnCase{
		{sq: 37, hq: 2, skv: 37, hkv: 1, d: 8, dv: 8, dt: ir.F16, attrs: ir.Attrs{"causal": true}, residual: true},
		{sq: 6, hq: 6, skv: 21, hkv: 3, d: 12, dv: 8, dt: ir.F16, attrs: ir.Attrs{"layout": "hsd", "k_layout": "hds", "v_layout": "shd", "scale": 0.4}},
		{sq: 3, hq: 2, skv: 40, hkv: 1, d: 32, dv: 32, dt: ir.F32, kvt: ir.Q8_0, attrs: ir.Attrs{"causal": true}, kvLen: 29},
	} {
		p, vals := c.problem(t)
		t.Run(c.name(), func(t *testing.T) { kerneltest.CheckForms(t, kernels.AttentionFlash, p, cfg, vals) })
	}
}

// The split template accepts the prefill cases too (up to 32 rows per key/value head); it runs
// the decode-sized ones (sq ≤ 5), which is what it is for, to bound lavapipe's compile time.
func TestAttentionSplit(t *testing.T) {
	runAttnCases(t, kernels.AttentionSplit, []kernels.Config{nil,
		{"splits": 4, "block_k": 16, "wg": 128, "combine": 0},
		{"splits": 8, "block_k": 8, "wg": 64, "combine": 1},
		{"splits": 16, "block_k": 32, "wg": 256, "combine": 1}}) // the GPU's static choice
}

// TestAttentionSplitCombineRepeats: with combine=1 the last workgroup of each key/value head to
// arrive combines the ranges, counted at a Sync word that it resets; runs one after the other
// (different kv_len, so different ranges are empty) must each match the interpreter, which they
// would not if a count were left behind.
func TestAttentionSplitCombineRepeats(t *testing.T) {
	c := attnCase{sq: 1, hq: 9, skv: 67, hkv: 3, d: 16, dv: 16, dt: ir.F32, attrs: ir.Attrs{"causal": true}, kvLen: 50}
	p, vals := c.problem(t)
	d := kerneltest.Device(t)
	caps := kerneltest.CapsOf(&d.Info)
	cfg := kernels.Config{"splits": 8, "block_k": 16, "wg": 64, "combine": 1}
	if err := kernels.AttentionSplit.Space.Valid(p, cfg, caps); err != nil {
		t.Fatal(err)
	}
	l, err := kernels.AttentionSplit.Build(p, cfg, caps)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Steps) != 1 || len(l.Sync) != 1 {
		t.Fatalf("%d steps, %d sync buffers: want one step counting at one Sync buffer", len(l.Steps), len(l.Sync))
	}
	bench, err := tune.NewBench(d, p, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bench.Close()
	for run, kv := range []int{50, 5, 67, 1, 50} {
		vals[3] = ir.TensorFromFloat64s(ir.T(ir.I32), []float64{float64(kv)})
		got, err := bench.Run(context.Background(), vals)
		if err != nil {
			t.Fatal(err)
		}
		want, err := kerneltest.Expect(p, vals)
		if err != nil {
			t.Fatal(err)
		}
		if msg := kerneltest.Compare(got[0], want[0], kerneltest.Tolerance(ir.F32)); msg != "" {
			t.Errorf("run %d (kv_len %d): %s", run, kv, msg)
		}
	}
}
