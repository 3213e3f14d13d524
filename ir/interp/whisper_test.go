package interp

import (
	"fmt"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
)

// The Whisper encoder oracle (testdata/hf/whisper-tiny-encoder) built by hand: conv1d front end
// with GELU (erf form), learned positions, pre-LayerNorm blocks with biased projections and
// bidirectional attention. Run with fused ops and with their compositions.
func TestWhisperEncoderOracle(t *testing.T) {
	const mels, frames, d, heads, ffn, layers, positions = 16, 64, 64, 4, 128, 2, 32
	weights, err := safetensors.ReadAll("../../testdata/hf/whisper-tiny-encoder/weights.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := safetensors.ReadAll("../../testdata/hf/whisper-tiny-encoder/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, decompose := range []bool{false, true} {
		t.Run(fmt.Sprintf("decompose=%v", decompose), func(t *testing.T) {
			l := &llamaBuilder{b: ir.NewBuilder("encode"), decompose: decompose}
			b := l.b
			params := map[string]*ir.Tensor{}
			w := func(n string) ir.Value {
				params[n] = weights[n]
				return b.Param(n, weights[n].Type)
			}
			feat, _ := b.Input("input_features", ir.T(ir.F32, mels, frames))
			x := l.op(ir.Gelu, nil, l.op(ir.Conv1d, ir.Attrs{"padding": 1}, feat, w("conv1.weight"), w("conv1.bias")))
			x = l.op(ir.Gelu, nil, l.op(ir.Conv1d, ir.Attrs{"padding": 1, "stride": 2}, x, w("conv2.weight"), w("conv2.bias")))
			x = l.op(ir.Add, nil, l.op(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, x), w("embed_positions.weight"))
			for i := 0; i < layers; i++ {
				p := fmt.Sprintf("layers.%d.", i)
				h := l.op(ir.LayerNorm, nil, x, w(p+"self_attn_layer_norm.weight"), w(p+"self_attn_layer_norm.bias"))
				split := func(v ir.Value) ir.Value {
					return l.op(ir.Reshape, ir.Attrs{"shape": []int{positions, heads, d / heads}}, v)
				}
				q := split(l.op(ir.Linear, nil, h, w(p+"self_attn.q_proj.weight"), w(p+"self_attn.q_proj.bias")))
				k := split(l.op(ir.Linear, nil, h, w(p+"self_attn.k_proj.weight")))
				v := split(l.op(ir.Linear, nil, h, w(p+"self_attn.v_proj.weight"), w(p+"self_attn.v_proj.bias")))
				o := l.op(ir.Reshape, ir.Attrs{"shape": []int{positions, d}}, l.op(ir.Attention, nil, q, k, v))
				x = l.op(ir.Add, nil, x, l.op(ir.Linear, nil, o, w(p+"self_attn.out_proj.weight"), w(p+"self_attn.out_proj.bias")))
				h = l.op(ir.LayerNorm, nil, x, w(p+"final_layer_norm.weight"), w(p+"final_layer_norm.bias"))
				h = l.op(ir.Gelu, nil, l.op(ir.Linear, nil, h, w(p+"fc1.weight"), w(p+"fc1.bias")))
				x = l.op(ir.Add, nil, x, l.op(ir.Linear, nil, h, w(p+"fc2.weight"), w(p+"fc2.bias")))
			}
			x = l.op(ir.LayerNorm, nil, x, w("layer_norm.weight"), w("layer_norm.bias"))
			out, err := EvalValues(b.Function(), Env{Inputs: map[string]*ir.Tensor{"input_features": golden["input_features"]}, Params: params}, x)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, "last hidden state", out[0].Float64s(), golden["last_hidden_state"].Float64s(), d)
		})
	}
}
