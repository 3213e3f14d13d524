package vkc

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
)

// dqPlanTol is the row-relative error TestQuantPrefillAtCapacity allows the plan's logits
// against the interpreter's: the import's defaults round the prefill's activations to f16 in
// both, and a product on cooperative matrices also rounds each dequantized weight to f16
// (coopRoundings), which two layers carry into the logits.
const dqPlanTol = 1e-2

// TestQuantPrefillAtCapacity runs the K-quant and Q8_0 files of the llama.cpp oracle's tiny
// llama with a prefill of 144 tokens: the score function of a 144-token prompt, compiled for
// the device at the import's defaults, against the interpreter. On a device with cooperative
// matrices its products take matmul_coop_dq, the static choice for prefill products of 128
// rows or more (the weights copied to f16 by one kernel, then an f16 product), with the epilogues
// the plan fuses into them (RoPE and the cache writes, SwiGLU's product, the residual add); the
// test requires it. Skipped on a device without cooperative matrices (lavapipe: there the
// products take matmul_tiled, which the other plan tests check).
func TestQuantPrefillAtCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the interpreter's 144-row score of each file takes seconds")
	}
	d := device(t)
	if len(targetOf(d).Caps.CoopShapes) == 0 {
		t.Skipf("missing capability: cooperative matrices (%s has none): matmul_coop_dq runs only there", d.Info.Name)
	}
	for _, name := range []string{"llama-tiny/llama-tiny-Q4_K_M", "llama-tiny/llama-tiny-Q6_K", "llama-tiny/llama-tiny-Q8_0"} {
		t.Run(name[len("llama-tiny/"):], func(t *testing.T) {
			path := oracles.File(t, "llamacpp", name+".gguf")
			dir := t.TempDir()
			const n = 144
			im, err := importer.ImportGGUF(path, importer.GGUFOptions{Ctx: 160, Prefill: n, YAMLDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			im.Model.Close()
			m := parseImported(t, dir, im.YAML)
			defer m.Close()
			p, _ := compileExample(t, m, Options{Target: targetOf(d), Functions: []string{"score"}})
			dq := 0
			for _, dsp := range p.Function("score").Dispatches {
				if strings.HasPrefix(p.Modules[dsp.Module].Key, "matmul_coop_dq ") {
					dq++
				}
			}
			t.Logf("score: %d of %d dispatches are matmul_coop_dq's", dq, len(p.Function("score").Dispatches))
			if dq == 0 {
				t.Errorf("no product of %d rows took matmul_coop_dq", n)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			ids := make([]int32, n)
			for i := range ids {
				ids[i] = int32(rng.IntN(1000))
			}
			exe := roundTrip(t, d, p)
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
