package vkc

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/runtime"
)

// dqPlanTol is the row-relative error TestQuantPrefillAtCapacity allows the plan's logits
// against the interpreter's: the import's defaults round the prefill's activations to f16 in
// both, and a product on cooperative matrices also rounds each dequantized weight to f16
// (coopRoundings), which two layers carry into the logits.
const dqPlanTol = 1e-2

// TestQuantPrefillAtCapacity runs whole plans whose block-quantized products take
// matmul_coop_dq (the weights copied to f16 by one kernel, then matmul_coop's f16 product), the
// static choice for prefill products of 128 rows or more on a GPU with cooperative matrices:
// the llama.cpp oracle's tiny llama in Q4_K_M (and on such a GPU Q6_K and Q8_0), imported at its
// defaults with a 128-token prefill, its score function lowered with matmul_coop_dq for every
// product it accepts (the tiny model's products are too small for the static choice to take it
// by itself) and run on a 128-token prompt, against the interpreter. On a device without
// cooperative matrices (lavapipe) the matrices are emulated (kernels.Caps.EmulateMatrices, an
// 8×8×8 product) for one product (SwiGLU's, with its epilogue), so CI checks the template's
// copy, the product reading it and their place in a plan; on a GPU the real ones run everywhere.
func TestQuantPrefillAtCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the interpreter's 128-row score and the plan's emulated matrices take seconds")
	}
	d := device(t)
	caps, own := targetOf(d).Caps, targetOf(d).Caps
	names := []string{"llama-tiny/llama-tiny-Q4_K_M", "llama-tiny/llama-tiny-Q6_K", "llama-tiny/llama-tiny-Q8_0"}
	if len(caps.CoopShapes) == 0 {
		if !caps.VulkanMemoryModel {
			t.Skipf("missing capability: cooperative matrices, and the Vulkan memory model their emulation needs (%s has neither)", d.Info.Name)
		}
		caps.CoopShapes = []kernels.CoopShape{{M: 8, N: 8, K: 8, A: codegen.F16, B: codegen.F16, C: codegen.F32, Result: codegen.F32}}
		caps.EmulateMatrices = true
		names = names[:1] // emulated matrices are slow on lavapipe
	}
	dev := lower.ModelFor(d.DeviceFingerprint())
	for _, name := range names {
		t.Run(name[len("llama-tiny/"):], func(t *testing.T) {
			path := oracles.File(t, "llamacpp", name+".gguf")
			dir := t.TempDir()
			const n = 128
			im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 128, Prefill: n, YAMLDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			im.Model.Close()
			m := parseImported(t, dir, im.YAML)
			defer m.Close()
			// With emulated matrices, one product: SwiGLU's up projection, which reads the
			// gate's result in its epilogue. Lavapipe takes half a minute to compile an
			// emulated product and its copy from an empty driver cache (each further epilogue
			// added that again; matmul_coop's own tests check the epilogues).
			took := false
			take := func(p *kernels.Problem) bool {
				if !caps.EmulateMatrices {
					return true
				}
				if !took && strings.Contains(p.Key(), "silu") {
					took = true
					return true
				}
				return false
			}
			p, _, err := lower.Lower(m, []*ir.Function{m.Function("score")}, lower.Options{Caps: caps, Device: d.DeviceFingerprint(), Model: dev,
				Choose: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
					if _, cfg, err := kernels.Build(kernels.MatmulCoopDQ, p, caps); err == nil && take(p) {
						return kernels.MatmulCoopDQ, cfg, nil
					}
					return lower.StaticChoice(p, own, dev) // no emulated matrices elsewhere
				}})
			if err != nil {
				t.Fatal(err)
			}
			dq := 0
			for _, dsp := range p.Function("score").Dispatches {
				if strings.HasPrefix(p.Modules[dsp.Module].Key, "matmul_coop_dq ") {
					dq++
				}
			}
			t.Logf("score: %d of %d dispatches are matmul_coop_dq's", dq, len(p.Function("score").Dispatches))
			if dq == 0 {
				t.Fatalf("no product of %d rows took matmul_coop_dq", n)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(rng.IntN(1000))
			}
			exe, err := d.Load(p, runtime.LoadOptions{AllowForeign: caps.EmulateMatrices})
			if err != nil {
				t.Fatal(err)
			}
			defer exe.Close()
			res, err := exe.Run(context.Background(), "score", map[string][]byte{"tokens": engine.Int32Bytes(ids...), "pos": engine.Int32Bytes(0)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Outputs(p.Function("score"), res)
			if err != nil {
				t.Fatal(err)
			}
			want, err := interp.NewSession(m).Run("score", map[string]*ir.Tensor{"tokens": ir.TensorFromFloat64s(ir.T(ir.I32, n), f64s(ids)),
				"pos": ir.TensorFromFloat64s(ir.T(ir.I32), []float64{0})})
			if err != nil {
				t.Fatal(err)
			}
			e := oracles.RowRel(got["logits"].Float64s(), want["logits"].Float64s(), 1000)
			t.Logf("score of %d tokens: logits %.3g row-relative from the interpreter's", n, e)
			if e > dqPlanTol {
				t.Errorf("score of %d tokens: logits %.3g row-relative from the interpreter's, more than %g", n, e, dqPlanTol)
			}
		})
	}
}
