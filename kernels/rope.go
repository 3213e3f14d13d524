package kernels

import (
	"fmt"
	"math"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// The rope templates: rope (any seq_axis, both modes), rope_norm (a per-row rmsnorm and rope in
// one pass; Qwen3's QK-norm) and rope_cache_write (keys rotated as they are written into the
// cache, in place). The position is the run-time i32 operand pos, read by the kernel, so one
// recorded dispatch serves every decode step.
//
// Angles: (pos + s)·theta^(-2i/d) with theta^(-2i/d) = exp2(i·(-2·log2(theta)/d)) in f32; against
// the interpreter's float64 the angle differs by about (pos + s)·1e-6 relative, well inside the
// tolerance at the positions of tests and below f16 resolution in practice.
var (
	Rope           = ropeTemplate(ir.Rope, flatSpace(), buildRope)
	RopeCacheWrite = ropeTemplate(ir.RopeCacheWrite, flatSpace(), buildRope)
	RopeNorm       = ropeTemplate(ir.RopeNorm, RowSpace(func(*Problem) int { return 1 }, 1), buildRopeNorm)
)

func init() {
	// With a run-time length, rope_cache_write writes the run's rows only (the Len operand).
	RopeCacheWrite.ReadsLength = true
	Register(Rope)
	Register(RopeCacheWrite)
	Register(RopeNorm)
}

func ropeTemplate(op ir.Op, space Space, build func(*Problem, Config, Caps) (*Launch, error)) *Template {
	accept := func(p *Problem, caps Caps) error {
		if p.Op != op {
			return otherOp(p)
		}
		return acceptRope(p, caps)
	}
	return &Template{Name: op.String(), Accepts: accept, Space: space,
		Build: func(p *Problem, c Config, caps Caps) (*Launch, error) {
			if err := accept(p, caps); err != nil {
				return nil, err
			}
			return build(p, c, caps)
		}}
}

func acceptRope(p *Problem, caps Caps) error {
	if p.Expr != nil {
		return fmt.Errorf("%s takes no epilogue", p.OpName())
	}
	_, outs, err := ir.Infer(p.Op, p.Attrs, p.Args)
	if err != nil {
		return err
	}
	if len(p.Outs) != 1 || !p.Outs[0].Equal(outs[0]) {
		return fmt.Errorf("results %v, the op gives %v", p.Outs, outs)
	}
	if p.Op == ir.RopeCacheWrite && p.Args[0].DType.Quantized() {
		return acceptQuantCacheWrite(p, caps) // cachewrite_quant.go
	}
	return checkDTypes(p, caps)
}

// ropeGeom is the geometry of a rope over x: rows of d features, h = d/2 pairs; a row's position
// along the sequence axis is (row / rowsPerSeq) % seqLen.
type ropeGeom struct {
	d, h, rows     int
	rowsPerSeq     int
	seqLen         int
	half           bool
	log2Theta      float64
	scale          ir.RopeScaling
	posArg, xArg   int
	cache          bool // write rows pos.. of the state (Arg 0) instead of a fresh result
	cacheRows      int  // the state's rows along axis 0
	cacheRowLength int  // elements per state row
}

func readRope(p *Problem) ropeGeom {
	g := ropeGeom{half: p.Attrs.String("mode", "half") == "half", log2Theta: math.Log2(p.Attrs.Float("theta", 10000))}
	g.scale, _ = ir.RopeScalingOf(p.Attrs) // checked by acceptRope (ir.Infer)
	g.xArg, g.posArg = 0, 1
	seqAxis := p.Attrs.Int("seq_axis", 0)
	switch p.Op {
	case ir.RopeNorm:
		g.posArg = 2
	case ir.RopeCacheWrite:
		g.xArg, g.posArg, g.cache, seqAxis = 1, 2, true, 0
		st := p.Args[0].Shape
		g.cacheRows = st[0]
		g.cacheRowLength = st.NumElements() / st[0]
	}
	x := p.Args[g.xArg].Shape
	g.d = x[x.Rank()-1]
	g.h = g.d / 2
	g.rows = x.NumElements() / g.d
	ax, _ := ir.NormAxis(seqAxis, x.Rank())
	g.rowsPerSeq = x.Strides()[ax] / g.d
	g.seqLen = x[ax]
	return g
}

// pair is the element offsets within a row of pair i.
func (g ropeGeom) pair(b *codegen.Builder, i codegen.Value) (codegen.Value, codegen.Value) {
	if g.half {
		return i, b.Add(i, b.U32(uint32(g.h)))
	}
	j := b.Mul(i, b.U32(2))
	return j, b.Add(j, b.U32(1))
}

// seq is the row's index along the sequence axis (u32).
func (g ropeGeom) seq(b *codegen.Builder, row codegen.Value) codegen.Value {
	return b.Rem(b.Div(row, b.U32(uint32(g.rowsPerSeq))), b.U32(uint32(g.seqLen)))
}

// rotate returns the pair (x0, x1) rotated by (pos + s)·theta^(-2i/d); pos is i32, s and i u32.
func (g ropeGeom) rotate(b *codegen.Builder, pos, s, i, x0, x1 codegen.Value) (codegen.Value, codegen.Value) {
	p := b.Convert(b.Add(pos, b.Bitcast(s, codegen.I32)), codegen.F32)
	inv := g.scaled(b, b.Exp2(b.Mul(b.Convert(i, codegen.F32), b.F32(float32(-2*g.log2Theta/float64(g.d))))))
	a := reduceAngle(b, b.Mul(p, inv))
	sin, cos := b.Sin(a), b.Cos(a)
	return b.Sub(b.Mul(x0, cos), b.Mul(x1, sin)), b.Add(b.Mul(x1, cos), b.Mul(x0, sin))
}

// reduceAngle returns a (f32 radians) less the nearest multiple k of 2π, in [-π, π]: Vulkan
// bounds sin's and cos's error there only (2⁻¹¹ absolutely), and a device may reduce a larger
// argument coarsely. NVIDIA's rotation by 1023 rad (exact in f32: pair 0 of a cache's last
// position) was 1.0e-4 of the row scale off in the tuner's check of the 1B file's one-row QKV
// product, the size of an error in a reduction through f32 (1023·2⁻²⁴ rad). With this and the
// check's rope tolerance (tune.ProblemTolerance) every configuration of that product passed on
// the H100 (session 20; the two were not measured apart). llvmpipe's sin and cos are exact at
// 2·10⁵ rad with or without it (TestRopeLargeAngles). 2π is split into parts of 9 significant bits (twoPiParts),
// so that each k·part is exact for k below 2¹⁵ (angles up to 2·10⁵ rad) and a − k·hi is exact
// (Sterbenz); the rest of each subtraction rounds at the reduced angle's scale.
func reduceAngle(b *codegen.Builder, a codegen.Value) codegen.Value {
	k := b.Floor(b.Add(b.Mul(a, b.F32(float32(1/(2*math.Pi)))), b.F32(0.5)))
	for _, part := range twoPiParts {
		a = b.Sub(a, b.Mul(k, b.F32(part)))
	}
	return a
}

// twoPiParts are 2π as three f32s of 9 significant bits and one of the rest.
var twoPiParts = func() []float32 {
	var parts []float32
	rest := 2 * math.Pi
	for range 3 {
		hi := math.Float32frombits(math.Float32bits(float32(rest)) &^ (1<<(24-9) - 1))
		parts = append(parts, hi)
		rest -= float64(hi)
	}
	return append(parts, float32(rest))
}()

// scaled applies the frequency scaling (ir.RopeScaling) to an inverse frequency inv (f32), in
// f32 on the device: llama3's wavelength thresholds become thresholds on inv itself (a wavelength
// 2π/inv below original_ctx/high_freq_factor is inv above 2π·high_freq_factor/original_ctx), and
// the blend (1 − s)·inv/factor + s·inv is continuous at both, so an f32 rounding that moves a
// frequency across a threshold changes nothing measurable.
func (g ropeGeom) scaled(b *codegen.Builder, inv codegen.Value) codegen.Value {
	sc := g.scale
	switch sc.Type {
	case ir.RopeScalingLinear:
		return b.Div(inv, b.F32(float32(sc.Factor)))
	case ir.RopeScalingLlama3:
		ctx := float64(sc.OriginalCtx)
		lo, hi := sc.LowFreqFactor, sc.HighFreqFactor
		scaled := b.Div(inv, b.F32(float32(sc.Factor)))
		// s = (ctx/λ − lo)/(hi − lo) with ctx/λ = inv·ctx/2π.
		sm := b.Div(b.Sub(b.Mul(inv, b.F32(float32(ctx/(2*math.Pi)))), b.F32(float32(lo))), b.F32(float32(hi-lo)))
		mid := b.Add(b.Mul(b.Sub(b.F32(1), sm), scaled), b.Mul(sm, inv))
		keep := b.Gt(inv, b.F32(float32(2*math.Pi*hi/ctx)))
		full := b.Lt(inv, b.F32(float32(2*math.Pi*lo/ctx)))
		return b.Select(keep, inv, b.Select(full, scaled, mid))
	}
	return inv
}

// loadPos reads the run-time position (i32 or u32 scalar operand) as an i32.
func loadPos(b *codegen.Builder, buf *codegen.Buffer) codegen.Value {
	return b.Bitcast(b.Load(buf, b.U32(0)), codegen.I32)
}

func buildRope(p *Problem, c Config, caps Caps) (*Launch, error) {
	if p.Op == ir.RopeCacheWrite && p.Args[0].DType.Quantized() {
		return buildQuantCacheWrite(p, c, caps)
	}
	g := readRope(p)
	xt, pt, ot := p.Args[g.xArg], p.Args[g.posArg], p.Outs[0]
	b := newBuilder(p.OpName(), caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(pt.DType), codegen.ReadOnly)
	y := b.Buffer("y", StorageType(ot.DType), codegen.WriteOnly)
	reads := g.cache && p.Rows != nil && p.Rows.Reads
	var lenBuf *codegen.Buffer
	if reads {
		lenBuf = b.Buffer("n", codegen.U32, codegen.ReadOnly)
	}
	pos := loadPos(b, posBuf)
	eachFlat(b, c, g.rows*g.h, func(q codegen.Value) {
		row, i := b.Div(q, b.U32(uint32(g.h))), b.Rem(q, b.U32(uint32(g.h)))
		j0, j1 := g.pair(b, i)
		rb := b.Mul(row, b.U32(uint32(g.d)))
		i0, i1 := b.Add(rb, j0), b.Add(rb, j1)
		s := g.seq(b, row)
		y0, y1 := g.rotate(b, pos, s, i, LoadAs(b, x, i0, xt.DType), LoadAs(b, x, i1, xt.DType))
		if !g.cache {
			StoreAs(b, y, i0, y0, ot.DType)
			StoreAs(b, y, i1, y1, ot.DType)
			return
		}
		// Rows outside the cache (pos < 0 or past its end) are not written, nor, with a
		// run-time length n, the rows past the run's n.
		t := b.Add(pos, b.Bitcast(s, codegen.I32))
		in := b.And(b.Ge(t, b.I32(0)), b.Lt(t, b.I32(int32(g.cacheRows))))
		if reads {
			in = b.And(in, b.Lt(s, b.Load(lenBuf, b.U32(0))))
		}
		b.If(in, func() {
			off := b.Mul(b.Bitcast(pos, codegen.U32), b.U32(uint32(g.cacheRowLength)))
			StoreAs(b, y, b.Add(off, i0), y0, ot.DType)
			StoreAs(b, y, b.Add(off, i1), y1, ot.DType)
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "per_thread")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: flatGrid(g.rows*g.h, c, caps),
		Bindings: []Operand{{Arg, g.xArg}, {Arg, g.posArg}, {Out, 0}},
		Scale:    flatScale(p, p.Rows.Arg(g.xArg), g.rows*g.h, c)}
	if reads {
		st.Bindings = append(st.Bindings, Operand{Len, 0})
	}
	l := &Launch{Steps: []Step{st}, Flops: float64(8 * g.rows * g.h), Bytes: 2 * float64(xt.Bytes())}
	if g.cache {
		l.InPlace = map[int]int{0: 0}
	}
	return l, nil
}

func buildRopeNorm(p *Problem, c Config, caps Caps) (*Launch, error) {
	g := readRope(p)
	xt, wt, pt, ot := p.Args[0], p.Args[1], p.Args[2], p.Outs[0]
	eps := p.Attrs.Float("eps", 1e-5)
	b := newBuilder("rope_norm", caps)
	x := b.Buffer("x", StorageType(xt.DType), codegen.ReadOnly)
	w := b.Buffer("w", StorageType(wt.DType), codegen.ReadOnly)
	posBuf := b.Buffer("pos", StorageType(pt.DType), codegen.ReadOnly)
	y := b.Buffer("y", StorageType(ot.DType), codegen.WriteOnly)
	var pos codegen.Value
	WalkRows(b, c, g.rows, func(rw *RowWalk) {
		pos = loadPos(b, posBuf)
		rb := b.Mul(rw.Row, b.U32(uint32(g.d)))
		ss := rw.Sum(g.d, b.F32(0), func(k codegen.Value) codegen.Value {
			v := LoadAs(b, x, b.Add(rb, k), xt.DType)
			return b.Mul(v, v)
		})
		inv := b.InverseSqrt(b.Add(b.Div(ss, b.F32(float32(g.d))), b.F32(float32(eps))))
		// The normalised value is rounded to x's dtype before rotation, as the unfused graph
		// stores it.
		norm := func(j codegen.Value) codegen.Value {
			v := b.Mul(b.Mul(LoadAs(b, x, b.Add(rb, j), xt.DType), inv), LoadAs(b, w, j, wt.DType))
			if st := StorageType(xt.DType); st != codegen.F32 {
				v = b.Convert(b.Convert(v, st), codegen.F32)
			}
			return v
		}
		s := g.seq(b, rw.Row)
		rw.Each(g.h, func(i codegen.Value) {
			j0, j1 := g.pair(b, i)
			y0, y1 := g.rotate(b, pos, s, i, norm(j0), norm(j1))
			StoreAs(b, y, b.Add(rb, j0), y0, ot.DType)
			StoreAs(b, y, b.Add(rb, j1), y1, ot.DType)
		})
	})
	k, spec, err := finish(b, caps, c, "wg", "rows")
	if err != nil {
		return nil, err
	}
	st := Step{Kernel: k, Spec: spec, Grid: RowGrid(g.rows, c, caps),
		Bindings: []Operand{{Arg, 0}, {Arg, 1}, {Arg, 2}, {Out, 0}}, Scale: rowScale(p, p.Rows.Arg(0), g.rows, c)}
	return &Launch{Steps: []Step{st}, Flops: float64(12 * g.rows * g.h), Bytes: 2 * float64(xt.Bytes())}, nil
}
