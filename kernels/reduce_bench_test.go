package kernels_test

import (
	"context"
	"math/rand"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// Benchmarks of the row-wise, rope, layout and conv templates at SmolLM2-135M's sizes (d 576,
// 9 heads of 64, vocab 49152, 128-token prefill) and Whisper-base's front end (80 mel bins,
// 3000 frames, 512 channels). Run on the GPU machine with
//
//	kernels.test -test.run '^$' -test.bench 'Rows' -test.benchtime 1x -test.v
//
// Each logs the median GPU time of the default configuration and of every other valid point
// (the tuner's job later; here to see how far the default is from the best), with the bytes the
// problem must move as GB/s next to a peer measured in the same run: a copy of as many bytes by
// the elementwise template.

// rowsMeasure runs a Launch of p with tmpl at c (nil: the default) and returns its median time.
func rowsMeasure(d *runtime.Device, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) (time.Duration, *kernels.Launch, error) {
	caps := kerneltest.CapsOf(&d.Info)
	l, _, err := kernels.BuildAt(tmpl, p, c, caps)
	if err != nil {
		return 0, nil, err
	}
	var free []func()
	defer func() {
		for i := len(free) - 1; i >= 0; i-- {
			free[i]()
		}
	}()
	alloc := func(n int) (*runtime.Buffer, error) {
		b, err := d.NewBuffer(int64(max(n, 16)))
		if err == nil {
			free = append(free, b.Free)
		}
		return b, err
	}
	bufs := map[kernels.OperandKind][]*runtime.Buffer{}
	for _, a := range args {
		b, err := alloc(len(a.Data))
		if err != nil {
			return 0, nil, err
		}
		if err := d.Upload(b, 0, a.Data); err != nil {
			return 0, nil, err
		}
		bufs[kernels.Arg] = append(bufs[kernels.Arg], b)
	}
	for i, t := range p.Outs {
		if a, ok := l.InPlace[i]; ok {
			bufs[kernels.Out] = append(bufs[kernels.Out], bufs[kernels.Arg][a])
			continue
		}
		b, err := alloc(t.Bytes())
		if err != nil {
			return 0, nil, err
		}
		bufs[kernels.Out] = append(bufs[kernels.Out], b)
	}
	for _, n := range l.Scratch {
		b, err := alloc(n)
		if err != nil {
			return 0, nil, err
		}
		bufs[kernels.Scratch] = append(bufs[kernels.Scratch], b)
	}
	var spec runtime.ProgramSpec
	for _, s := range l.Steps {
		k := s.Kernel
		rk := runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
		for id, v := range s.Spec {
			rk.Spec = append(rk.Spec, runtime.SpecConstant{ID: uint32(id), Value: v})
		}
		pl, err := d.NewPipeline(rk)
		if err != nil {
			return 0, nil, err
		}
		free = append(free, pl.Close)
		disp := runtime.Dispatch{Pipeline: pl, Push: s.Push, Grid: s.Grid}
		for bi, op := range s.Bindings {
			disp.Bindings = append(disp.Bindings, runtime.Binding{Buffer: bufs[op.Kind][op.Index], Access: tune.RuntimeAccess(k.Bindings[bi].Access)})
		}
		spec.Dispatches = append(spec.Dispatches, disp)
	}
	spec.KeepOrder = true
	prog, err := d.NewProgram(spec)
	if err != nil {
		return 0, nil, err
	}
	defer prog.Close()
	o := runtime.MeasureOptions{}
	if d.Info.Type == runtime.CPU {
		o = runtime.MeasureOptions{Warmup: 1, Reps: 2, MaxRounds: 1}
	}
	m, err := prog.Measure(context.Background(), o)
	return m.Median, l, err
}

func rowsBench(b *testing.B, tmpl *kernels.Template, p *kernels.Problem, args []*ir.Tensor) {
	d := kerneltest.Device(b)
	caps := kerneltest.CapsOf(&d.Info)
	if err := tmpl.Accepts(p, caps); err != nil {
		b.Fatalf("%s refuses %s: %v", tmpl.Name, p.Key(), err)
	}
	for i := 0; i < b.N; i++ {
		t, l, err := rowsMeasure(d, tmpl, p, nil, args)
		if err != nil {
			b.Fatal(err)
		}
		n := int(l.Bytes) / 4
		peer := ir.T(ir.F32, max(n, 1))
		cp := &kernels.Fused{Inputs: []ir.Type{peer}, Nodes: []kernels.FusedNode{{Op: ir.Input, DType: ir.F32}}, Outputs: []int{0}}
		cpp := &kernels.Problem{Op: kernels.FusedElementwise, Args: []ir.Type{peer}, Outs: []ir.Type{peer}, Expr: cp}
		tp, _, err := rowsMeasure(d, kernels.Elementwise, cpp, nil, []*ir.Tensor{ir.NewTensor(peer)})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(t.Nanoseconds())/1e3, "µs")
		b.ReportMetric(l.Bytes/t.Seconds()/1e9, "GB/s")
		b.Logf("%s %s: default %v, %.1f GB/s, %.1f GFLOP/s; a copy of as many bytes %v (ratio %.2f)",
			tmpl.Name, p.Key(), t, l.Bytes/t.Seconds()/1e9, l.Flops/t.Seconds()/1e9, tp, float64(tp)/float64(t))
		type point struct {
			c kernels.Config
			t time.Duration
		}
		var best []point
		for _, c := range tmpl.Space.Points() {
			if tmpl.Space.Valid(p, c, caps) != nil {
				continue
			}
			tc, _, err := rowsMeasure(d, tmpl, p, c, args)
			if err != nil {
				b.Logf("  %s: %v", c.Key(), err)
				continue
			}
			best = append(best, point{c, tc})
		}
		for j := 0; j < len(best); j++ {
			for k := j + 1; k < len(best); k++ {
				if best[k].t < best[j].t {
					best[j], best[k] = best[k], best[j]
				}
			}
		}
		for j := 0; j < len(best) && j < 3; j++ {
			b.Logf("  best %d: %s %v", j+1, best[j].c.Key(), best[j].t)
		}
	}
}

// benchArgs returns random arguments for p drawn with seed.
func benchArgs(p *kernels.Problem, seed int64) []*ir.Tensor {
	rng := rand.New(rand.NewSource(seed))
	out := make([]*ir.Tensor, len(p.Args))
	for i, t := range p.Args {
		out[i] = kerneltest.Random(rng, t)
	}
	return out
}

func BenchmarkRows(b *testing.B) {
	pt := func(op ir.Op, attrs ir.Attrs, args ...ir.Type) *kernels.Problem {
		a, outs, err := ir.Infer(op, attrs, args)
		if err != nil {
			b.Fatal(err)
		}
		return &kernels.Problem{Op: op, Attrs: a, Args: args, Outs: outs, NumOpArgs: len(args)}
	}
	h := ir.F16
	pos := ir.T(ir.I32)
	pads1 := ir.Attrs{"pads": []int{1, 1, 1, 1}}
	nhwc1 := ir.Attrs{"pads": []int{1, 1, 1, 1}, "layout": "nhwc"}
	for _, tc := range []struct {
		name string
		tmpl *kernels.Template
		p    *kernels.Problem
	}{
		{"rmsnorm_prefill", kernels.RMSNorm, pt(ir.RMSNorm, nil, ir.T(h, 128, 576), ir.T(h, 576))},
		{"rmsnorm_decode", kernels.RMSNorm, pt(ir.RMSNorm, nil, ir.T(h, 1, 576), ir.T(h, 576))},
		{"rmsnorm_decode_8b", kernels.RMSNorm, pt(ir.RMSNorm, nil, ir.T(ir.F32, 1, 4096), ir.T(ir.F32, 4096))},
		{"add_rmsnorm_prefill", kernels.AddRMSNorm, pt(ir.AddRMSNorm, nil, ir.T(h, 128, 576), ir.T(h, 128, 576), ir.T(h, 576))},
		{"softmax_scores", kernels.Softmax, pt(ir.Softmax, nil, ir.T(ir.F32, 9*128, 128))},
		{"argmax_vocab", kernels.Reduce, pt(ir.Argmax, nil, ir.T(ir.F32, 1, 49152))},
		{"argtopk_vocab", kernels.TopK, pt(ir.ArgTopK, ir.Attrs{"k": 64}, ir.T(ir.F32, 1, 49152))},
		{"argtopk_tiny", kernels.TopK, pt(ir.ArgTopK, ir.Attrs{"k": 64}, ir.T(ir.F32, 1, 256))},
		{"rope_prefill", kernels.Rope, pt(ir.Rope, nil, ir.T(h, 128, 9, 64), pos)},
		{"rope_norm_prefill", kernels.RopeNorm, pt(ir.RopeNorm, nil, ir.T(h, 128, 9, 64), ir.T(h, 64), pos)},
		{"embedding_prefill", kernels.Embedding, pt(ir.Embedding, nil, ir.T(h, 49152, 576), ir.T(ir.I32, 128))},
		{"transpose_tiled", kernels.TransposeTiled, pt(ir.Transpose, ir.Attrs{"perm": []int{1, 0}}, ir.T(h, 1536, 576))},
		{"transpose_heads", kernels.Transpose, pt(ir.Transpose, ir.Attrs{"perm": []int{1, 0, 2}}, ir.T(h, 128, 9, 64))},
		{"whisper_conv1", kernels.Conv1d, pt(ir.Conv1d, ir.Attrs{"padding": 1}, ir.T(h, 80, 3000), ir.T(h, 512, 80, 3), ir.T(h, 512))},
		{"whisper_conv1_tiled", kernels.Conv1dTiled, pt(ir.Conv1d, ir.Attrs{"padding": 1}, ir.T(h, 80, 3000), ir.T(h, 512, 80, 3), ir.T(h, 512))},
		{"whisper_conv2", kernels.Conv1d, pt(ir.Conv1d, ir.Attrs{"padding": 1, "stride": 2}, ir.T(h, 512, 3000), ir.T(h, 512, 512, 3), ir.T(h, 512))},
		{"whisper_conv2_tiled", kernels.Conv1dTiled, pt(ir.Conv1d, ir.Attrs{"padding": 1, "stride": 2}, ir.T(h, 512, 3000), ir.T(h, 512, 512, 3), ir.T(h, 512))},
		// a ResNet-18 stage-2 convolution (3x3, 64 channels, 56x56) in both layouts, both templates
		{"resnet_conv3x3", kernels.Conv2d, pt(ir.Conv2d, pads1, ir.T(h, 1, 64, 56, 56), ir.T(h, 64, 64, 3, 3), ir.T(h, 64))},
		{"resnet_conv3x3_gemm", kernels.Conv2dGemm, pt(ir.Conv2d, pads1, ir.T(h, 1, 64, 56, 56), ir.T(h, 64, 64, 3, 3), ir.T(h, 64))},
		{"resnet_conv3x3_nhwc", kernels.Conv2d, pt(ir.Conv2d, nhwc1, ir.T(h, 1, 56, 56, 64), ir.T(h, 64, 64, 3, 3), ir.T(h, 64))},
		{"resnet_conv3x3_nhwc_gemm", kernels.Conv2dGemm, pt(ir.Conv2d, nhwc1, ir.T(h, 1, 56, 56, 64), ir.T(h, 64, 64, 3, 3), ir.T(h, 64))},
		{"mobilenet_depthwise", kernels.Conv2d, pt(ir.Conv2d, ir.Attrs{"pads": []int{1, 1, 1, 1}, "groups": 96}, ir.T(h, 1, 96, 56, 56), ir.T(h, 96, 1, 3, 3), ir.T(h, 96))},
		{"resnet_maxpool", kernels.Pool2d, pt(ir.MaxPool2d, ir.Attrs{"kernel": []int{3, 3}, "strides": []int{2, 2}, "pads": []int{1, 1, 1, 1}}, ir.T(h, 1, 64, 112, 112))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			args := benchArgs(tc.p, 1)
			if tc.p.Op == ir.Rope || tc.p.Op == ir.RopeNorm {
				args[len(args)-1] = ir.TensorFromFloat64s(pos, []float64{0})
			}
			rowsBench(b, tc.tmpl, tc.p, args)
		})
	}
}
