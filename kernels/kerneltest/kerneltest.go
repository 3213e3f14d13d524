// Package kerneltest runs kernel templates on a Vulkan device (lavapipe in CI) and checks them
// against the reference interpreter. Tests of kernels and of the tuner use it.
package kerneltest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"

	"vkc/codegen"
	"vkc/ir"
	"vkc/ir/interp"
	"vkc/kernels"
	"vkc/runtime"
)

// CapsOf converts the runtime's description of a device into what templates need.
func CapsOf(info *runtime.DeviceInfo) kernels.Caps {
	c := info.Caps
	arith := uint32(1 << 2)
	shuffle := uint32(1<<4 | 1<<3)
	return kernels.Caps{
		SubgroupSize:          int(c.SubgroupSize),
		SubgroupArithmetic:    uint32(c.SubgroupOps)&arith != 0 && c.SubgroupStages&0x20 != 0,
		SubgroupShuffle:       uint32(c.SubgroupOps)&shuffle == shuffle && c.SubgroupStages&0x20 != 0,
		Float16:               c.ShaderFloat16,
		Storage16:             c.StorageBuffer16BitAccess,
		MaxSharedBytes:        int(c.MaxSharedMemory),
		MaxInvocations:        int(c.MaxWorkgroupInvocations),
		MaxWorkgroupSize:      [3]int{int(c.MaxWorkgroupSize[0]), int(c.MaxWorkgroupSize[1]), int(c.MaxWorkgroupSize[2])},
		MaxGroups:             [3]int{int(c.MaxWorkgroupCount[0]), int(c.MaxWorkgroupCount[1]), int(c.MaxWorkgroupCount[2])},
		MinStorageOffsetAlign: int(max(c.MinStorageBufferOffset, 4)),
	}
}

var (
	devOnce sync.Once
	dev     *runtime.Device
	devErr  error
)

// Device opens the default device once per test binary, with the Khronos validation layer when
// it is installed. Without a Vulkan device the test is skipped, saying so.
func Device(t testing.TB) *runtime.Device {
	t.Helper()
	devOnce.Do(func() {
		dir, _ := os.MkdirTemp("", "vkc-kerneltest-")
		dev, devErr = runtime.Open(runtime.Options{Validation: true, CacheDir: dir})
		if devErr != nil && !errors.Is(devErr, runtime.ErrNoVulkan) && !errors.Is(devErr, runtime.ErrNoDevice) {
			// The validation layer may be missing on a developer machine; run without it.
			dev, devErr = runtime.Open(runtime.Options{CacheDir: dir})
		}
	})
	if errors.Is(devErr, runtime.ErrNoVulkan) || errors.Is(devErr, runtime.ErrNoDevice) {
		t.Skipf("no Vulkan device (install mesa-vulkan-drivers): %v", devErr)
	}
	if devErr != nil {
		t.Fatal(devErr)
	}
	t.Cleanup(func() {
		if msgs := dev.TakeMessages(); len(msgs) > 0 {
			for _, m := range msgs {
				t.Errorf("validation: %s", m)
			}
		}
	})
	return dev
}

// deviceBytes encodes a host tensor the way kernels keep it in device memory (bool as u32).
func deviceBytes(x *ir.Tensor) []byte {
	if x.Type.DType != ir.Bool {
		return x.Data
	}
	out := make([]byte, 4*len(x.Data))
	for i, v := range x.Data {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

func deviceSize(t ir.Type) int {
	if t.DType == ir.Bool {
		return 4 * t.Shape.NumElements()
	}
	return t.Bytes()
}

func hostTensor(t ir.Type, b []byte) *ir.Tensor {
	if t.DType != ir.Bool {
		return &ir.Tensor{Type: t, Data: b}
	}
	x := ir.NewTensor(t)
	for i := range x.Data {
		if binary.LittleEndian.Uint32(b[4*i:]) != 0 {
			x.Data[i] = 1
		}
	}
	return x
}

// Run executes a Launch for p on d with the given arguments and returns the results.
func Run(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, args []*ir.Tensor) ([]*ir.Tensor, error) {
	if len(args) != len(p.Args) {
		return nil, fmt.Errorf("%d arguments for a problem of %d", len(args), len(p.Args))
	}
	var free []*runtime.Buffer
	defer func() {
		for _, b := range free {
			b.Free()
		}
	}()
	alloc := func(n int) (*runtime.Buffer, error) {
		b, err := d.NewBuffer(int64(max(n, 16)))
		if err == nil {
			free = append(free, b)
		}
		return b, err
	}
	argBuf := make([]*runtime.Buffer, len(args))
	for i, a := range args {
		if !a.Type.Equal(p.Args[i]) {
			return nil, fmt.Errorf("argument %d is %s, the problem wants %s", i, a.Type, p.Args[i])
		}
		b, err := alloc(deviceSize(a.Type))
		if err != nil {
			return nil, err
		}
		if err := d.Upload(b, 0, deviceBytes(a)); err != nil {
			return nil, err
		}
		argBuf[i] = b
	}
	outBuf := make([]*runtime.Buffer, len(p.Outs))
	for i, t := range p.Outs {
		if a, ok := l.InPlace[i]; ok {
			outBuf[i] = argBuf[a]
			continue
		}
		b, err := alloc(deviceSize(t))
		if err != nil {
			return nil, err
		}
		outBuf[i] = b
	}
	scratch := make([]*runtime.Buffer, len(l.Scratch))
	for i, n := range l.Scratch {
		b, err := alloc(n)
		if err != nil {
			return nil, err
		}
		scratch[i] = b
	}
	var pipes []*runtime.Pipeline
	defer func() {
		for _, pl := range pipes {
			pl.Close()
		}
	}()
	var spec runtime.ProgramSpec
	for si, s := range l.Steps {
		k := s.Kernel
		rk := runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
		for id, v := range s.Spec {
			rk.Spec = append(rk.Spec, runtime.SpecConstant{ID: uint32(id), Value: v})
		}
		pl, err := d.NewPipeline(rk)
		if err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", si, k.Name, err)
		}
		pipes = append(pipes, pl)
		if len(s.Bindings) != len(k.Bindings) {
			return nil, fmt.Errorf("step %d (%s): %d operands for %d bindings", si, k.Name, len(s.Bindings), len(k.Bindings))
		}
		disp := runtime.Dispatch{Pipeline: pl, Push: s.Push, Grid: s.Grid}
		for bi, op := range s.Bindings {
			var buf *runtime.Buffer
			switch op.Kind {
			case kernels.Arg:
				buf = argBuf[op.Index]
			case kernels.Out:
				buf = outBuf[op.Index]
			case kernels.Scratch:
				buf = scratch[op.Index]
			default:
				return nil, fmt.Errorf("step %d binding %d: bad operand %v", si, bi, op)
			}
			acc := runtime.ReadWrite
			switch k.Bindings[bi].Access {
			case codegen.ReadOnly:
				acc = runtime.Read
			case codegen.WriteOnly:
				acc = runtime.Write
			}
			disp.Bindings = append(disp.Bindings, runtime.Binding{Buffer: buf, Access: acc})
		}
		spec.Dispatches = append(spec.Dispatches, disp)
	}
	spec.KeepOrder = true
	prog, err := d.NewProgram(spec)
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	if err := prog.Run(context.Background(), nil, nil); err != nil {
		return nil, err
	}
	outs := make([]*ir.Tensor, len(p.Outs))
	for i, t := range p.Outs {
		b := make([]byte, deviceSize(t))
		if err := d.Download(outBuf[i], 0, b); err != nil {
			return nil, err
		}
		outs[i] = hostTensor(t, b)
	}
	return outs, nil
}

// Expect evaluates p's reference function on args in the interpreter.
func Expect(p *kernels.Problem, args []*ir.Tensor) ([]*ir.Tensor, error) {
	f, err := p.Reference()
	if err != nil {
		return nil, err
	}
	env := interp.Env{Inputs: map[string]*ir.Tensor{}}
	for i, a := range args {
		env.Inputs[fmt.Sprintf("a%d", i)] = a
	}
	vals := make([]ir.Value, len(f.Outputs))
	for i, o := range f.Outputs {
		vals[i] = o.Value
	}
	return interp.EvalValues(f, env, vals...)
}

// Compare checks got against want: for floats, max abs error ≤ tol relative to the largest
// magnitude of the row (last axis) plus tol absolute; integers and bools exactly. It returns ""
// or a description of the worst element.
func Compare(got, want *ir.Tensor, tol float64) string {
	if !got.Type.Equal(want.Type) {
		return fmt.Sprintf("type %s, want %s", got.Type, want.Type)
	}
	g, w := got.Float64s(), want.Float64s()
	row := 1
	if r := want.Type.Shape.Rank(); r > 0 {
		row = want.Type.Shape[r-1]
	}
	worst, wi := 0.0, -1
	for r := 0; r*row < len(w) || (len(w) == 0 && r == 0); r++ {
		if len(w) == 0 {
			break
		}
		scale := 0.0
		for _, v := range w[r*row : (r+1)*row] {
			scale = math.Max(scale, math.Abs(v))
		}
		for i := r * row; i < (r+1)*row; i++ {
			if math.IsNaN(w[i]) != math.IsNaN(g[i]) {
				return fmt.Sprintf("element %d: got %g, want %g", i, g[i], w[i])
			}
			if !want.Type.DType.IsFloat() {
				if g[i] != w[i] {
					return fmt.Sprintf("element %d: got %g, want %g", i, g[i], w[i])
				}
				continue
			}
			e := math.Abs(g[i]-w[i]) / (scale + 1)
			if e > worst {
				worst, wi = e, i
			}
		}
	}
	if worst > tol {
		return fmt.Sprintf("element %d: got %g, want %g (error %.3g of the row scale, tolerance %.3g)", wi, g[wi], w[wi], worst, tol)
	}
	return ""
}

// Tolerance is the default comparison tolerance for a dtype: results are computed in f32, so
// f16 results differ from the interpreter's rounding by about one f16 ulp.
func Tolerance(d ir.DType) float64 {
	if d == ir.F16 {
		return 2e-3
	}
	return 1e-4
}

// Random returns a tensor of normal values (floats) or small integers in [0, 8) (ints).
func Random(rng *rand.Rand, t ir.Type) *ir.Tensor {
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		switch {
		case t.DType.IsFloat():
			v[i] = rng.NormFloat64()
		case t.DType == ir.Bool:
			v[i] = float64(rng.Intn(2))
		default:
			v[i] = float64(rng.Intn(8))
		}
	}
	return ir.TensorFromFloat64s(t, v)
}

// Check builds p with template t at configuration c (nil: the default), runs it on the test
// device with args and compares every result with the interpreter.
func Check(t *testing.T, tmpl *kernels.Template, p *kernels.Problem, c kernels.Config, args []*ir.Tensor) {
	t.Helper()
	d := Device(t)
	caps := CapsOf(&d.Info)
	var l *kernels.Launch
	var err error
	if c == nil {
		l, c, err = kernels.Build(tmpl, p, caps)
	} else {
		if err = tmpl.Space.Valid(p, c, caps); err == nil {
			l, err = tmpl.Build(p, c, caps)
		}
	}
	if err != nil {
		t.Fatalf("%s %s: %v", tmpl.Name, p.Key(), err)
	}
	got, err := Run(d, p, l, args)
	if err != nil {
		t.Fatalf("%s %s [%s]: run: %v", tmpl.Name, p.Key(), c.Key(), err)
	}
	want, err := Expect(p, args)
	if err != nil {
		t.Fatalf("%s %s: reference: %v", tmpl.Name, p.Key(), err)
	}
	for i := range want {
		if msg := Compare(got[i], want[i], Tolerance(p.Outs[i].DType)); msg != "" {
			t.Errorf("%s %s [%s]: result %d: %s", tmpl.Name, p.Key(), c.Key(), i, msg)
		}
	}
}

// Names lists template names for messages.
func Names(ts []*kernels.Template) string {
	n := make([]string, len(ts))
	for i, t := range ts {
		n[i] = t.Name
	}
	return strings.Join(n, ", ")
}
