package lower

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
)

// ─── The compile-time dequantization fallback ────────────────────────────────────────────────
//
// A block-quantized weight (ir.Q4_K …) reaches lowering as the operand of a problem (a linear's
// W, an embedding's table). When some kernel template reads that dtype for the problem
// (kernels.Template.Quantized), the problem goes to it unchanged and the plan keeps ggml's
// blocks byte for byte. When none does, this fallback rewrites the problem: each
// block-quantized operand becomes its dequantized form, computed here at compile time by the
// reference dequantizer (ir/quant, exactly ggml's values) and stored as a weight of its own, and
// the plan's record says so in a note. So every GGUF file compiles and runs, at the memory and
// bandwidth of the dequantized weights, until kernels for its formats exist; adding a template
// that lists a dtype switches the fallback off for it, with no change here.
//
// The dequantized weights are stored as f16, as issue 13 asks (half the memory of f32), unless
// the device lacks 16-bit storage, a value exceeds f16's range, or the op's result dtype follows
// the weight's (an embedding's rows have its table's dtype, and a quantized table gives f32
// rows): then f32, which holds ggml's values exactly. A source already dequantized to f32 is
// reused as it is. f16 rounds ggml's values (d·q needs up to 17 significant bits), which moves
// logits by about 1e-3 row-relative (the llama.cpp oracle's README measures 1.5e-3 for f16
// weights); exact f32 arithmetic on the exact values is the interpreter's, and the block
// kernels' once they exist.
//
// This file is the one place that decides it: addUnit calls dequantFallback for every problem.

// dequantFallback returns the problem to choose a template for, and for each operand it
// rewrote the storage dtype its dequantized weight has (nil when nothing was rewritten: no
// block-quantized operand, or a template reads them all).
func (fl *fnLowerer) dequantFallback(p *kernels.Problem, args []ir.Value) (*kernels.Problem, map[int]ir.DType, error) {
	quantized := false
	for _, a := range p.Args {
		quantized = quantized || a.DType.Quantized()
	}
	if !quantized {
		return p, nil, nil
	}
	if _, err := kernels.For(p, fl.l.caps); err == nil {
		return p, nil, nil // a kernel reads the blocks
	}
	q := *p
	q.Args = append([]ir.Type(nil), p.Args...)
	deq := map[int]ir.DType{}
	for i, a := range p.Args {
		if !a.DType.Quantized() {
			continue
		}
		x, err := fl.dequantized(args[i], p.OpName(), p.Op == ir.Embedding)
		if err != nil {
			return nil, nil, err
		}
		q.Args[i] = x.Type
		deq[i] = x.Type.DType
	}
	return &q, deq, nil
}

// dequantTo dequantizes block-quantized x (ggml's values, exact in f32) into a tensor of dtype
// dt (f32, or f16 rounded to nearest even), a chunk at a time so a large table never needs
// more than its result in memory; false when dt is f16 and a value exceeds its range.
func dequantTo(x *ir.Tensor, dt ir.DType) (*ir.Tensor, bool) {
	f := x.Type.DType.Format()
	out := ir.NewTensor(ir.Type{DType: dt, Shape: x.Type.Shape.Clone()})
	n := x.NumElements()
	chunk := (1 << 16) / f.BlockElems * f.BlockElems
	y := make([]float32, chunk)
	for lo := 0; lo < n; lo += chunk {
		m := min(chunk, n-lo)
		b0 := lo / f.BlockElems * f.BlockBytes
		if err := f.Dequantize(x.Data[b0:b0+m/f.BlockElems*f.BlockBytes], y[:m]); err != nil {
			panic("lower: " + err.Error()) // the tensor's type guarantees whole blocks
		}
		for i, v := range y[:m] {
			if dt == ir.F32 {
				binary.LittleEndian.PutUint32(out.Data[4*(lo+i):], math.Float32bits(v))
				continue
			}
			if math.Abs(float64(v)) > 65504 {
				return nil, false
			}
			binary.LittleEndian.PutUint16(out.Data[2*(lo+i):], ir.F16Bits(v))
		}
	}
	return out, true
}

// dequantSource is the block-quantized tensor of v (a parameter, or a folded concatenation of
// parameters) and the name its dequantized weight is known by.
func (fl *fnLowerer) dequantSource(v ir.Value) (string, *ir.Tensor, error) {
	n := v.Node
	switch {
	case n.Op == ir.Param:
		x := fl.l.m.Weights[n.Name]
		if x == nil {
			return "", nil, fmt.Errorf("function %s: parameter %s has no weights loaded", fl.f.Name, n.Name)
		}
		return n.Name, x, nil
	case fl.folds(n) && fl.values[n] != nil:
		x := fl.values[n]
		name := x.name
		if name == "" {
			name = fl.l.constName(x)
		}
		return name, x.tensor(), nil
	}
	return "", nil, fmt.Errorf("function %s: %s: a block-quantized operand that is neither a parameter nor computed at compile time (no kernel reads %s)",
		fl.f.Name, fl.where(n), v.Type().DType)
}

// dequantized returns the dequantized weight for operand v (made once per source and storage
// dtype, shared by every function of the plan), recording it for the plan's note; exact asks
// for f32.
func (fl *fnLowerer) dequantized(v ir.Value, op string, exact bool) (*ir.Tensor, error) {
	name, x, err := fl.dequantSource(v)
	if err != nil {
		return nil, err
	}
	l := fl.l
	if d, ok := l.dequant[name+"@f32"]; ok {
		return d.t, nil
	}
	if d, ok := l.dequant[name+"@f16"]; ok && !exact {
		return d.t, nil
	}
	dt := ir.F16
	if !l.caps.Storage16 || exact {
		dt = ir.F32
	}
	t, ok := dequantTo(x, dt)
	if !ok {
		dt = ir.F32 // a value beyond f16's range
		t, _ = dequantTo(x, dt)
	}
	if l.dequant == nil {
		l.dequant = map[string]*dequantWeight{}
	}
	key := name + "@" + dt.String()
	l.dequant[key] = &dequantWeight{t: t, name: key, from: x.Type.DType, op: op, quantBytes: len(x.Data)}
	return t, nil
}

// dequantLoc is where the dequantized weight of v in storage dtype dt lives (a weight buffer,
// made on first use).
func (fl *fnLowerer) dequantLoc(v ir.Value, dt ir.DType) (loc, error) {
	k := deqLocKey{v, dt}
	if lc, ok := fl.deqLocs[k]; ok {
		return lc, nil
	}
	name, _, err := fl.dequantSource(v)
	if err != nil {
		return loc{}, err
	}
	d := fl.l.dequant[name+"@"+dt.String()]
	if d == nil {
		return loc{}, fmt.Errorf("function %s: %s: no dequantized weight (a bug in lower)", fl.f.Name, fl.where(v.Node))
	}
	wi, err := fl.l.weight(d.name, blobOf(d.t))
	if err != nil {
		return loc{}, err
	}
	if v.Node.Op != ir.Param {
		fl.l.folded++ // a compile-time concatenation of blocks (merge-linears), as locOf counts
	}
	b := fl.newBuf(buffer{kind: bufWeight, index: wi, size: fl.l.weights[wi].size})
	lc := loc{buf: b, size: fl.l.weights[wi].size}
	if fl.deqLocs == nil {
		fl.deqLocs = map[deqLocKey]loc{}
	}
	fl.deqLocs[k] = lc
	return lc, nil
}

type deqLocKey struct {
	v  ir.Value
	dt ir.DType
}

// dequantWeight is one weight the fallback dequantized.
type dequantWeight struct {
	t          *ir.Tensor
	name       string // the plan's weight name: the source's, with "@f16" or "@f32"
	from       ir.DType
	op         string // the op of the first problem that needed it
	quantBytes int
}

// Int8NotePrefix starts the plan-record note of a function whose kernels round activations to 8
// bits (kernels.Int8Mode): its results are not exact arithmetic's.
const Int8NotePrefix = "8-bit activations: "

// DequantNotePrefix starts the plan-record notes of the dequantization fallback.
const DequantNotePrefix = "compile-time dequantization: "

// dequantNotes summarises the fallback for the plan's record: one line per format and storage
// dtype, e.g. "compile-time dequantization: 13 q4_k weights (1.1 MiB as blocks) stored as f16
// (3.9 MiB): no kernel template reads q4_k yet (first for linear)".
func (l *lowerer) dequantNotes() []string {
	type key struct{ from, to ir.DType }
	type sum struct {
		n, qb, db int
		op        string
	}
	sums := map[key]*sum{}
	var keys []key
	names := make([]string, 0, len(l.dequant))
	for n := range l.dequant {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := l.dequant[n]
		k := key{d.from, d.t.Type.DType}
		s := sums[k]
		if s == nil {
			s = &sum{op: d.op}
			sums[k] = s
			keys = append(keys, k)
		}
		s.n++
		s.qb += d.quantBytes
		s.db += len(d.t.Data)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].from != keys[j].from {
			return keys[i].from < keys[j].from
		}
		return keys[i].to < keys[j].to
	})
	var out []string
	for _, k := range keys {
		s := sums[k]
		out = append(out, fmt.Sprintf(DequantNotePrefix+"%d %s weights (%s as blocks) stored as %s (%s): no kernel template reads %s for it (first for %s)",
			s.n, k.from, byteCount(s.qb), k.to, byteCount(s.db), k.from, s.op))
	}
	return out
}

func byteCount(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
