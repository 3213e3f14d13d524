package kernels_test

import (
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// TestLoopsKeptOnCPU: on a CPU implementation every loop of a kernel is marked DontUnroll
// (codegen.Builder.DontUnrollLoops: lavapipe compiled attention_flash's unrolled key tiles for
// seconds), and on a GPU none is (its compiler decides).
func TestLoopsKeptOnCPU(t *testing.T) {
	c := attnCase{sq: 1, hq: 4, skv: 128, hkv: 2, d: 16, dv: 16, dt: ir.F32, attrs: ir.Attrs{"causal": true}, kvLen: 50}
	p, _ := c.problem(t)
	gpu := kernels.Lavapipe
	gpu.CPU = false
	for _, tc := range []struct {
		name string
		caps kernels.Caps
		want uint32 // the LoopMerge's control: 2 DontUnroll, 0 None
	}{{"cpu", kernels.Lavapipe, 2}, {"gpu", gpu, 0}} {
		l, _, err := kernels.Build(kernels.AttentionFlash, p, tc.caps)
		if err != nil {
			t.Fatal(err)
		}
		words := l.Steps[0].Kernel.Words
		loops := 0
		for i := 5; i < len(words); {
			n, op := int(words[i]>>16), words[i]&0xffff
			if n == 0 {
				t.Fatalf("%s: instruction of 0 words at %d", tc.name, i)
			}
			if op == 246 { // OpLoopMerge merge continue control
				loops++
				if got := words[i+3]; got != tc.want {
					t.Errorf("%s: loop %d has control %d, want %d", tc.name, loops, got, tc.want)
				}
			}
			i += n
		}
		if loops == 0 {
			t.Errorf("%s: attention_flash has no loop", tc.name)
		}
	}
}
