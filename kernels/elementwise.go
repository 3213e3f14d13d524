package kernels

import (
	"encoding/binary"
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Elementwise computes a FusedElementwise problem: any DAG of pointwise ops over broadcast
// inputs, every output written in one pass. Each invocation computes `per_thread` consecutive
// elements; the grid spreads over x and y when x would exceed the device's group limit.
var Elementwise = &Template{
	Name: "elementwise",
	Accepts: func(p *Problem, caps Caps) error {
		if p.Op != FusedElementwise {
			return ErrOtherOp
		}
		if p.Expr == nil || len(p.Outs) == 0 {
			return fmt.Errorf("no expression")
		}
		return checkDTypes(p, caps)
	},
	Space: NewSpace(Ints("wg", 128, 64, 256), Ints("per_thread", 1, 2, 4)).Where(fitsInvocations("wg")),
	Build: buildElementwise,
}

func init() { Register(Elementwise) }

// checkDTypes rejects dtypes kernels cannot store and f16 without 16-bit storage.
func checkDTypes(p *Problem, caps Caps) error { return checkDTypesExcept(p, caps, -1) }

// checkDTypesExcept is checkDTypes for every operand but argument skip (a block-quantized
// weight the template reads itself), or for all when skip is -1.
func checkDTypesExcept(p *Problem, caps Caps, skip int) error {
	for k, ts := range [][]ir.Type{p.Args, p.Outs} {
		for i, t := range ts {
			if k == 0 && i == skip {
				continue
			}
			if !Supported(t.DType) {
				return fmt.Errorf("dtype %s is not supported in device memory", t.DType)
			}
			if t.DType == ir.F16 && !caps.Storage16 {
				return fmt.Errorf("f16 tensors need 16-bit storage, which the device lacks")
			}
		}
	}
	return nil
}

// checkDTypesOf is checkDTypes for one operand.
func checkDTypesOf(t ir.Type, caps Caps) error {
	if !Supported(t.DType) {
		return fmt.Errorf("dtype %s is not supported in device memory", t.DType)
	}
	if t.DType == ir.F16 && !caps.Storage16 {
		return fmt.Errorf("f16 tensors need 16-bit storage, which the device lacks")
	}
	return nil
}

// fitsInvocations rejects workgroup sizes above the device's limits.
func fitsInvocations(param string) Predicate {
	return func(p *Problem, c Config, caps Caps) error {
		if n := c[param]; n > caps.MaxInvocations || n > caps.MaxWorkgroupSize[0] {
			return fmt.Errorf("%s=%d exceeds the device's %d invocations per workgroup", param, n, caps.MaxInvocations)
		}
		return nil
	}
}

// Grid1D spreads n workgroups over x and y within the device's limits; kernels recover the
// linear group index as x + y·gridX.
func Grid1D(n int, caps Caps) [3]uint32 {
	mx := caps.MaxGroups[0]
	if mx <= 0 {
		mx = 65535
	}
	if n <= mx {
		return [3]uint32{uint32(max(n, 1)), 1, 1}
	}
	y := (n + mx - 1) / mx
	return [3]uint32{uint32((n + y - 1) / y), uint32(y), 1}
}

// LinearGroup is the linear workgroup index of a Grid1D dispatch.
func LinearGroup(b *codegen.Builder) codegen.Value {
	wid := b.WorkgroupID()
	return b.Add(b.X(wid), b.Mul(b.Y(wid), b.X(b.NumWorkgroups())))
}

// PushU32 encodes push constants.
func PushU32(vals ...uint32) []byte {
	out := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], v)
	}
	return out
}

func buildElementwise(p *Problem, c Config, caps Caps) (*Launch, error) {
	f := p.Expr
	if err := f.Check(); err != nil {
		return nil, err
	}
	out := p.Outs[0].Shape
	for _, o := range p.Outs {
		if !o.Shape.Equal(out) {
			return nil, fmt.Errorf("elementwise results differ in shape: %s and %s", o.Shape, out)
		}
	}
	n := out.NumElements()
	wg, per := c["wg"], c["per_thread"]
	b := newBuilder("elementwise", caps)
	ins := make([]*codegen.Buffer, len(p.Args))
	for i, t := range p.Args {
		ins[i] = b.Buffer(fmt.Sprintf("in%d", i), StorageType(t.DType), codegen.ReadOnly)
	}
	outs := make([]*codegen.Buffer, len(p.Outs))
	for i, t := range p.Outs {
		outs[i] = b.Buffer(fmt.Sprintf("out%d", i), StorageType(t.DType), codegen.WriteOnly)
	}
	b.WorkgroupSize(b.U32(uint32(wg)), b.U32(1), b.U32(1))
	base := b.Mul(b.Add(b.Mul(LinearGroup(b), b.U32(uint32(wg))), b.X(b.LocalID())), b.U32(uint32(per)))
	for k := 0; k < per; k++ {
		idx := b.Add(base, b.U32(uint32(k)))
		b.If(b.Lt(idx, b.U32(uint32(n))), func() {
			vals := make([]codegen.Value, len(p.Args))
			for i, t := range p.Args {
				vals[i] = LoadAs(b, ins[i], BroadcastIndex(b, idx, out, t.Shape), t.DType)
			}
			res := f.Emit(b, vals)
			for i, t := range p.Outs {
				StoreAs(b, outs[i], idx, res[i], t.DType)
			}
		})
	}
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	groups := (n + wg*per - 1) / (wg * per)
	st := Step{Kernel: k, Grid: Grid1D(groups, caps), Scale: scaleItems(p, p.Rows.Out(0), Linear, n, wg*per)}
	for i := range p.Args {
		st.Bindings = append(st.Bindings, Operand{Arg, i})
	}
	for i := range p.Outs {
		st.Bindings = append(st.Bindings, Operand{Out, i})
	}
	var bytes float64
	for _, t := range p.Args {
		bytes += float64(t.Bytes())
	}
	for _, t := range p.Outs {
		bytes += float64(t.Bytes())
	}
	return &Launch{Steps: []Step{st}, Flops: float64(n * f.Ops()), Bytes: bytes}, nil
}
