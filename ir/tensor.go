package ir

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/vkc-project/vkc/ir/quant"
)

// Tensor is a host tensor: a type and its elements, little-endian in the dtype's encoding.
type Tensor struct {
	Type Type
	Data []byte
}

// NewTensor returns a zero tensor of type t.
func NewTensor(t Type) *Tensor { return &Tensor{Type: t, Data: make([]byte, t.Bytes())} }

// TensorFromFloat64s encodes vals (len = number of elements) as a tensor of type t.
// Integer dtypes truncate toward zero; Bool stores 1 for non-zero.
func TensorFromFloat64s(t Type, vals []float64) *Tensor {
	x := NewTensor(t)
	if len(vals) != t.Shape.NumElements() {
		panic(fmt.Sprintf("ir: %d values for a tensor of type %s", len(vals), t))
	}
	for i, v := range vals {
		x.SetFloat64(i, v)
	}
	return x
}

// NumElements is the number of elements.
func (x *Tensor) NumElements() int { return x.Type.Shape.NumElements() }

// Float64 returns element i (row-major) as float64.
func (x *Tensor) Float64(i int) float64 {
	d := x.Data
	switch x.Type.DType {
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:])))
	case F16:
		return float64(F16ToF32(binary.LittleEndian.Uint16(d[2*i:])))
	case BF16:
		return float64(BF16ToF32(binary.LittleEndian.Uint16(d[2*i:])))
	case I32:
		return float64(int32(binary.LittleEndian.Uint32(d[4*i:])))
	case U32:
		return float64(binary.LittleEndian.Uint32(d[4*i:]))
	case Bool:
		if d[i] != 0 {
			return 1
		}
		return 0
	}
	if f := quantFormats[x.Type.DType]; f != nil {
		// The block holding element i: blocks tile each row (the last axis) in order, so the
		// flat index i is in block i/BlockElems.
		var y [quant.MaxBlockElems]float32
		b := i / f.BlockElems
		f.DequantizeBlock(d[b*f.BlockBytes:], y[:])
		return float64(y[i%f.BlockElems])
	}
	panic("ir: Float64 of " + x.Type.DType.String())
}

// SetFloat64 stores v into element i, rounding to the dtype. Block-quantized dtypes cannot be
// set element by element (vkc has no quantizer): it panics for them.
func (x *Tensor) SetFloat64(i int, v float64) {
	d := x.Data
	switch x.Type.DType {
	case F32:
		binary.LittleEndian.PutUint32(d[4*i:], math.Float32bits(float32(v)))
	case F16:
		binary.LittleEndian.PutUint16(d[2*i:], F16Bits(float32(v)))
	case BF16:
		binary.LittleEndian.PutUint16(d[2*i:], BF16Bits(float32(v)))
	case I32:
		binary.LittleEndian.PutUint32(d[4*i:], uint32(int32(v)))
	case U32:
		binary.LittleEndian.PutUint32(d[4*i:], uint32(v))
	case Bool:
		if v != 0 {
			d[i] = 1
		} else {
			d[i] = 0
		}
	default:
		panic("ir: SetFloat64 of " + x.Type.DType.String())
	}
}

// Float64s returns all elements as float64 (a block-quantized tensor dequantized exactly as
// ggml does, each value exact in float32). A large tensor is converted on every processor, in
// pieces of whole blocks: the interpreter's reference converts every weight it does not read
// as blocks (a Llama-3.2-1B-shaped Q8_0 file's, all of them, took 22 s on one of the CI
// machine's cores, then 8.9 s on both, before the products read the rows of quantized weights).
func (x *Tensor) Float64s() []float64 {
	out := make([]float64, x.NumElements())
	block := 1
	if f := quantFormats[x.Type.DType]; f != nil {
		block = f.BlockElems
	}
	blocks := len(out) / block
	p := runtime.GOMAXPROCS(0)
	if p <= 1 || len(out) < convertAlone {
		x.float64sInto(out, 0)
		return out
	}
	p = min(p, blocks)
	var wg sync.WaitGroup
	for c := range p {
		lo, hi := blocks*c/p*block, blocks*(c+1)/p*block
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.float64sInto(out[lo:hi], lo)
		}()
	}
	wg.Wait()
	return out
}

// convertAlone is the number of elements below which Float64s converts on one processor.
const convertAlone = 1 << 18

// Float64sAt converts len(dst) elements of x from element lo on into dst, on the calling
// goroutine. For a block-quantized x, lo and len(dst) are whole numbers of blocks (a row of a
// weight is: blocks tile the last axis), so that the interpreter can dequantize a weight's rows
// as it reads them instead of holding the whole weight in float64.
func (x *Tensor) Float64sAt(dst []float64, lo int) {
	if f := quantFormats[x.Type.DType]; f != nil && (lo%f.BlockElems != 0 || len(dst)%f.BlockElems != 0) {
		panic(fmt.Sprintf("ir: %s: elements %d..%d are not whole blocks of %d", x.Type, lo, lo+len(dst), f.BlockElems))
	}
	x.float64sInto(dst, lo)
}

// float64sInto converts elements lo… of x into dst (lo a block's first element for a
// block-quantized x, and dst whole blocks).
func (x *Tensor) float64sInto(dst []float64, lo int) {
	d := x.Data
	if f := quantFormats[x.Type.DType]; f != nil {
		var y [quant.MaxBlockElems]float32
		n := f.BlockElems
		for b, first := 0, lo/n; b < len(dst)/n; b++ {
			f.DequantizeBlock(d[(first+b)*f.BlockBytes:], y[:])
			for j, v := range y[:n] {
				dst[b*n+j] = float64(v)
			}
		}
		return
	}
	switch x.Type.DType {
	case F16:
		// Through a table of the 65536 halves: an interpreter's reference converts every state
		// tensor and weight it reads (SmolLM2's caches: 24M halves), and the conversion one
		// element at a time was a fifth of its time.
		tab := f16Table()
		for i := range dst {
			dst[i] = tab[binary.LittleEndian.Uint16(d[2*(lo+i):])]
		}
	case F32:
		for i := range dst {
			dst[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*(lo+i):])))
		}
	default:
		for i := range dst {
			dst[i] = x.Float64(lo + i)
		}
	}
}

// f16Table maps each half's bits to its value.
var f16Table = sync.OnceValue(func() *[1 << 16]float64 {
	var t [1 << 16]float64
	for h := range t {
		t[h] = float64(F16ToF32(uint16(h)))
	}
	return &t
})

// Convert returns x converted to dtype d (same shape). A block-quantized x converts to any
// other dtype (dequantized); d itself must not be block-quantized unless it is x's dtype.
func (x *Tensor) Convert(d DType) *Tensor {
	if d == x.Type.DType {
		return &Tensor{Type: x.Type, Data: append([]byte(nil), x.Data...)}
	}
	return TensorFromFloat64s(Type{d, x.Type.Shape.Clone()}, x.Float64s())
}
