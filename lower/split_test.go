package lower_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune/kerneltest"
	"github.com/vkc-project/vkc/runtime"
)

// splitModel has a table and an LM head of 1000 rows of 64 (250 KB each in f32), read by an
// embedding, a tied linear (the table again) and an rmsnorm_linear with a bias and a fused
// epilogue, and a state of three 64 KiB caches: with a 64 KiB binding range and 96 KiB
// allocations, every region is cut into buffers and both weights into row pieces.
const splitModel = `
model: split
dims: {vocab: 1000, d: 64, ctx: 256}
weights: {init: random, seed: 3, scale: 0.5}
params:
  embed: %s[vocab, d]
  norm: {shape: [d], init: ones}
  head: %s[vocab, d]
  bias: [vocab]
state:
  c0: [ctx, d]
  c1: [ctx, d]
  c2: [ctx, d]
functions:
  prefill:
    dims: {seq: 16}
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs: [logits, tied]
    body: &body
      - x = embedding(embed, tokens)
      - c0 <- cache_write(c0, x, pos)
      - c1 <- cache_write(c1, mul(x, x), pos)
      - c2 <- cache_write(c2, add(x, x), pos)
      - logits = relu(linear(rmsnorm(x, norm, eps=1e-5), head, bias))
      - tied = linear(x, embed)
  decode:
    dims: {seq: 1}
    inputs:
      tokens: i32[seq]
      pos: i32[]
    outputs: [logits, tied]
    body: *body
`

// splitCaps are lavapipe's with a 64 KiB storage buffer range and 96 KiB allocations.
func splitCaps(d *runtime.Device) lower.Options {
	o := options(d)
	o.Caps.MaxBindingRange = 64 << 10
	o.Caps.MaxAllocation = 96 << 10
	return o
}

// TestSplitWeightsAndRegions: weights larger than one storage buffer are cut into row pieces
// (embedding, linear with a bias and an epilogue, rmsnorm_linear, a table tied to a head), and
// regions larger than one allocation into buffers; every binding, weight and state tensor lies in
// one buffer, each piece is stored once, and prefill and decode match the interpreter, the state
// too. The same model with q8_0 weights (read as blocks, piece by piece) does too.
func TestSplitWeightsAndRegions(t *testing.T) {
	d := kerneltest.Device(t)
	for _, dt := range []string{"f32", "q8_0"} {
		t.Run(dt, func(t *testing.T) {
			src := strings.ReplaceAll(splitModel, "%s", dt)
			dir := t.TempDir()
			if dt == "q8_0" {
				src = strings.Replace(src, "weights: {init: random, seed: 3, scale: 0.5}", "weights: {file: w.gguf}", 1)
				src = strings.Replace(src, "norm: {shape: [d], init: ones}", "norm: [d]", 1)
				writeQ8GGUF(t, filepath.Join(dir, "w.gguf"), 1000, 64)
			}
			path := filepath.Join(dir, "model.yaml")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := ir.ParseModel(path)
			if err != nil {
				t.Fatal(err)
			}
			opts := splitCaps(d)
			p, _, err := lower.Lower(m, m.Functions, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Weights.Split) == 0 || len(p.StateSplit) == 0 {
				t.Errorf("weights cut at %v, state at %v: want both in several buffers", p.Weights.Split, p.StateSplit)
			}
			var params, pieces uint64
			for _, pd := range m.Params {
				params += uint64(m.Weights[pd.Name].Type.Bytes())
			}
			for _, w := range p.Weights.Tensors {
				if w.Name == "embed" || w.Name == "head" {
					t.Errorf("weight %s stored whole (%d bytes), more than the 64 KiB range", w.Name, w.Size)
				}
				if strings.HasPrefix(w.Name, "embed[") || strings.HasPrefix(w.Name, "head[") {
					pieces++
				}
			}
			// f32 rows of 256 bytes: 4 pieces of at most 256 rows; q8_0 rows of 68: 2 of 512.
			want := map[string]uint64{"f32": 8, "q8_0": 4}[dt]
			if pieces != want {
				t.Errorf("%d pieces of embed and head, want %d", pieces, want)
			}
			if float64(p.Weights.Size) > 1.005*float64(params) {
				t.Errorf("weights %d bytes for %d bytes of parameters: a piece stored twice", p.Weights.Size, params)
			}
			for _, f := range p.Functions {
				for _, dp := range f.Dispatches {
					for _, b := range dp.Bindings {
						if b.Buffer.Range > opts.Caps.MaxBindingRange {
							t.Errorf("%s: %s binds %d bytes", f.Name, dp.Label, b.Buffer.Range)
						}
					}
				}
			}
			dm := p.DeviceMemory()
			if dm.Largest > opts.Caps.MaxAllocation {
				t.Errorf("largest allocation %d > %d", dm.Largest, opts.Caps.MaxAllocation)
			}
			exe, err := d.Load(p, runtime.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer exe.Close()
			s := interp.NewSession(m)
			pos := 0
			for _, f := range m.Functions {
				for k := 0; k < 2; k++ {
					in := exampleInputs(m, f, pos, uint64(5+k))
					// Ids across the pieces: the first and last rows, and the rows at the cuts.
					ids := []float64{0, 999, 255, 256, 511, 512, 767, 768}
					for i := range min(len(ids), in["tokens"].NumElements()) {
						in["tokens"].SetFloat64(i, ids[(i+k)%len(ids)])
					}
					compareRun(t, exe, s, f, in)
					pos += in["tokens"].NumElements()
				}
			}
			for _, st := range m.State {
				got, err := exe.ReadState(st.Name)
				if err != nil {
					t.Fatal(err)
				}
				if e := rowError(&ir.Tensor{Type: st.Type, Data: got}, s.State(st.Name)); e > rowTol {
					t.Errorf("state %s: row-relative error %.3g > %g", st.Name, e, rowTol)
				}
			}
		})
	}
}

// writeQ8GGUF writes embed and head as q8_0 [rows, d] (random int8, scales of 1/64) and norm
// and bias in f32.
func writeQ8GGUF(t *testing.T, path string, rows, d int) {
	rng := rand.New(rand.NewSource(9))
	var b gguf.Builder
	b.Add("general.architecture", gguf.MustValue("test"))
	q8 := func() []byte {
		out := make([]byte, 0, rows*d/32*34)
		for range rows * d / 32 {
			out = binary.LittleEndian.AppendUint16(out, ir.F16Bits(1.0/64))
			for range 32 {
				out = append(out, byte(rng.Intn(255)-127))
			}
		}
		return out
	}
	f32 := func(n int, v func(i int) float32) []byte {
		out := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v(i)))
		}
		return out
	}
	const ggmlQ8_0, ggmlF32 = 8, 0
	b.Tensor("embed", ggmlQ8_0, []uint64{uint64(d), uint64(rows)}, q8())
	b.Tensor("head", ggmlQ8_0, []uint64{uint64(d), uint64(rows)}, q8())
	b.Tensor("norm", ggmlF32, []uint64{uint64(d)}, f32(d, func(i int) float32 { return 1 + float32(i%5)/10 }))
	b.Tensor("bias", ggmlF32, []uint64{uint64(rows)}, f32(rows, func(i int) float32 { return float32(i%7)/7 - 0.5 }))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSplitRefusals: what cannot be cut is refused at compile time, naming the tensor and the
// limit: a weight a matmul reads whole, a row larger than a storage buffer, an intermediate
// larger than one.
func TestSplitRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		change      func(c *kernels.Caps)
		want        string
	}{
		{"matmul", `
model: r
dims: {n: 300, d: 64}
weights: {init: random, seed: 1}
params:
  w: [d, n]
functions:
  f:
    inputs:
      x: f32[4, d]
    outputs: [y]
    body:
      - y = matmul(x, w)
`, func(c *kernels.Caps) { c.MaxBindingRange = 64 << 10 },
			"weight w is 75.0 KiB, more than one storage buffer may hold (maxStorageBufferRange 64.0 KiB"},
		{"row", `
model: r
dims: {n: 8, d: 20000}
weights: {init: random, seed: 1}
params:
  w: [n, d]
functions:
  f:
    inputs:
      x: f32[1, d]
    outputs: [y]
    body:
      - y = linear(x, w)
`, func(c *kernels.Caps) { c.MaxBindingRange = 64 << 10 },
			"one row is 78.1 KiB (80000 bytes), more than one storage buffer may hold (64.0 KiB)"},
		{"intermediate", `
model: r
dims: {n: 256, d: 128}
weights: {init: random, seed: 1}
params:
  w: [d, d]
functions:
  f:
    inputs:
      x: f32[n, d]
    outputs: [y]
    body:
      - y = relu(linear(x, w))
`, func(c *kernels.Caps) { c.MaxBindingRange = 64 << 10 },
			"is 128.0 KiB (131072 bytes), more than the device's maxStorageBufferRange of 64.0 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ir.ParseModelBytes("r.yaml", []byte(tc.model), "")
			if err != nil {
				t.Fatal(err)
			}
			caps := kernels.Lavapipe
			tc.change(&caps)
			p, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: caps, CompilerVersion: "t"})
			if !errors.Is(err, lower.ErrDeviceLimit) || p != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant ErrDeviceLimit with %q", err, tc.want)
			}
		})
	}
}

// A plan that fits one allocation and one binding per weight has no split and no piece: the
// limits change nothing for it.
func TestNoSplitWhenItFits(t *testing.T) {
	m, err := ir.ParseModel("../examples/tinyllama/model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: kernels.Lavapipe, CompilerVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	caps := kernels.Lavapipe
	caps.MaxAllocation, caps.MaxBindingRange = 0, 0
	b, _, err := lower.Lower(m, m.Functions, lower.Options{Caps: caps, CompilerVersion: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Weights.Split)+len(a.StateSplit)+len(a.Arena.Split) > 0 {
		t.Errorf("tinyllama's regions are cut: %v %v %v", a.Weights.Split, a.StateSplit, a.Arena.Split)
	}
	for i := range a.Functions {
		if x, y := len(a.Functions[i].Dispatches), len(b.Functions[i].Dispatches); x != y {
			t.Errorf("%s: %d dispatches with lavapipe's limits, %d without", a.Functions[i].Name, x, y)
		}
	}
}

// TestRefusedBeforeAllocating: a plan whose device memory exceeds what the heap has free (192
// KV caches of 128 MiB, compiled for a device with no heap limit) is refused by the loader before
// it allocates anything, with the numbers and what would fit.
func TestRefusedBeforeAllocating(t *testing.T) {
	d := kerneltest.Device(t)
	m, err := ir.ParseModelBytes("big.yaml", []byte(`
model: bigstate
dims: {ctx: 32768, d: 1024, layers: 192}
weights: {init: random, seed: 1}
params:
  w: [d, d]
state:
  c.{i}: [ctx, d]
functions:
  decode:
    inputs:
      x: f32[1, d]
      pos: i32[]
    outputs: [y]
    body:
      - repeat i in 0..layers:
        - c.{i} <- cache_write(c.{i}, x, pos)
      - y = linear(x, w)
`), "")
	if err != nil {
		t.Fatal(err)
	}
	opts := options(d)
	opts.Caps.DeviceMemory = 0 // compiled for a device with more memory than this one
	p, _, err := lower.Lower(m, m.Functions, opts)
	if err != nil {
		t.Fatal(err)
	}
	room := d.Room()
	if need := p.DeviceMemory().Total(); need <= room.Free() {
		t.Skipf("needs a device with less than %d bytes free (this one has %d)", need, room.Free())
	}
	before := d.MemoryUsage()
	exe, err := d.Load(p, runtime.LoadOptions{})
	if err == nil {
		exe.Close()
		t.Fatal("a plan of 24 GiB loaded")
	}
	if after := d.MemoryUsage(); after != before {
		t.Errorf("memory allocated before the refusal: %+v, then %+v", before, after)
	}
	for _, want := range []string{"the plan needs 24.0 GiB of device memory (weights 4.0 MiB, state 24.0 GiB", "free", "would fit: a context of", "(--ctx ", "--kv q8_0: 6.4 GiB of KV caches instead of 24.0 GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, runtime.ErrOutOfDeviceMemory) {
		t.Errorf("%v: not ErrOutOfDeviceMemory", err)
	}
}

// External weights in a weight region of several buffers: each tensor is read from the file
// into the buffer that holds it.
func TestExternalWeightsInBuffers(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	b := ir.NewBuilder("f")
	x, _ := b.Input("x", ir.T(ir.F32, 2, 64))
	ws := map[string]*ir.Tensor{}
	h := x
	for _, name := range []string{"w1", "w2", "w3"} {
		w := b.Param(name, ir.T(ir.F32, 64, 64)) // 16 KiB each
		ws[name] = random(rng, ir.T(ir.F32, 64, 64))
		h = b.MustOp(ir.Linear, nil, h, w)
	}
	b.Output("y", h)
	m := newModel("extbuf", ws, b.Function())
	file := filepath.Join(t.TempDir(), "weights.safetensors")
	if err := safetensors.Write(file, ws); err != nil {
		t.Fatal(err)
	}
	d := kerneltest.Device(t)
	opts := options(d)
	opts.Caps.MaxAllocation = 24 << 10
	opts.ExternalWeights = file
	p, _, err := lower.Lower(m, m.Functions, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p.Weights.Source == nil || p.Weights.Split.Buffers() != 3 {
		t.Fatalf("source %v, %d weight buffers: want external weights in 3", p.Weights.Source, p.Weights.Split.Buffers())
	}
	exe, err := d.Load(p, runtime.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	runBoth(t, exe, interp.NewSession(m), m.Functions[0], map[string]*ir.Tensor{"x": random(rng, ir.T(ir.F32, 2, 64))})
}
