package lower

import (
	"encoding/binary"
	"unsafe"

	"github.com/vkc-project/vkc/ir"
)

// blob is a compile-time tensor's bytes (ir's encoding) as a list of byte slices in order. The
// slices may alias the model's weights: a merged projection (the concatenation of Q, K and V)
// or a view of a weight is a list of the sources' bytes, copied only when the plan is written
// (plan.Weights.Pieces), so folding it costs neither time nor memory. Ops that move elements
// (a transpose, an interleaving concatenation, a cast) materialise one new slice, in the
// weights' own dtype. A blob is never written to.
type blob struct {
	t      ir.Type
	pieces [][]byte
	name   string // a folded value's weight name ("" for parameters and constants)
}

// maxPieces bounds a blob's list: a concatenation or slice on an inner axis of a large outer
// extent would make one piece per row; past this many the bytes are copied into one slice.
const maxPieces = 64

func blobOf(x *ir.Tensor) *blob {
	if len(x.Data) == 0 {
		return &blob{t: x.Type}
	}
	return &blob{t: x.Type, pieces: [][]byte{x.Data}}
}

func (b *blob) size() int {
	n := 0
	for _, p := range b.pieces {
		n += len(p)
	}
	return n
}

// bytes returns the blob as one slice: its only piece, or a copy of its pieces.
func (b *blob) bytes() []byte {
	switch len(b.pieces) {
	case 0:
		return []byte{}
	case 1:
		return b.pieces[0]
	}
	out := make([]byte, 0, b.size())
	for _, p := range b.pieces {
		out = append(out, p...)
	}
	return out
}

// tensor is the blob as a tensor (sharing its bytes when it has one piece).
func (b *blob) tensor() *ir.Tensor { return &ir.Tensor{Type: b.t, Data: b.bytes()} }

// slice returns the bytes [off, off+n) of the blob as pieces (sharing its slices).
func (b *blob) slice(off, n int, out [][]byte) [][]byte {
	for _, p := range b.pieces {
		if n == 0 {
			break
		}
		if off >= len(p) {
			off -= len(p)
			continue
		}
		k := min(len(p)-off, n)
		out = appendPiece(out, p[off:off+k:off+k])
		off, n = 0, n-k
	}
	return out
}

// appendPiece appends p to ps, merging it into the last piece when it continues it in memory
// (the two halves of a weight sliced and concatenated again are one piece).
func appendPiece(ps [][]byte, p []byte) [][]byte {
	if len(p) == 0 {
		return ps
	}
	if k := len(ps) - 1; k >= 0 {
		last := ps[k]
		// Compared as addresses: a pointer one past last's end is not one checkptr (go test
		// -race) lets unsafe.Add make.
		if uintptr(unsafe.Pointer(unsafe.SliceData(p))) == uintptr(unsafe.Pointer(unsafe.SliceData(last)))+uintptr(len(last)) {
			ps[k] = unsafe.Slice(unsafe.SliceData(last), len(last)+len(p))
			return ps
		}
	}
	return append(ps, p)
}

// compact copies a blob of too many pieces into one slice.
func (b *blob) compact() *blob {
	if len(b.pieces) > maxPieces {
		b.pieces = [][]byte{b.bytes()}
	}
	return b
}

// foldNative computes node n from its arguments' blobs without the interpreter, for the ops
// folding meets on weights: views and concatenations (piece lists), transposes (a byte
// permutation in the element size) and casts between float dtypes. ok is false for any other
// op, which the interpreter evaluates. The result's bytes equal the interpreter's: these ops
// only move elements, and a float cast rounds as the interpreter does (TestNativeFold).
func foldNative(n *ir.Node, args []*blob) (*blob, bool) {
	if len(n.Outs) != 1 {
		return nil, false
	}
	t := n.Type()
	switch n.Op {
	case ir.Reshape:
		return &blob{t: t, pieces: args[0].pieces}, true
	case ir.Concat:
		ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), t.Shape.Rank())
		if err != nil {
			return nil, false
		}
		outer, _, _ := splitShape(t.Shape, ax)
		if t.DType.Quantized() && ax == t.Shape.Rank()-1 {
			return nil, false // blocks split along the last axis: the interpreter's
		}
		out := &blob{t: t}
		for o := 0; o < outer; o++ {
			for _, a := range args {
				// Each argument's part of one outer index: whole rows, so block-quantized
				// rows (ggml's blocks never cross a row) are copied as they are.
				row := ir.Type{DType: a.t.DType, Shape: a.t.Shape[ax:]}.Bytes()
				out.pieces = a.slice(o*row, row, out.pieces)
			}
		}
		return out.compact(), true
	case ir.Slice:
		if n.Attrs.Int("step", 1) != 1 || t.DType.Quantized() {
			return nil, false
		}
		x := args[0]
		ax, err := ir.NormAxis(n.Attrs.Int("axis", 0), x.t.Shape.Rank())
		if err != nil {
			return nil, false
		}
		outer, m, inner := splitShape(x.t.Shape, ax)
		start, _ := ir.ClampSlice(m, n.Attrs.Int("start", 0), n.Attrs.Int("end", 0))
		elem := elemBytes(t.DType)
		cnt := t.Shape[ax]
		out := &blob{t: t}
		for o := 0; o < outer; o++ {
			out.pieces = x.slice((o*m+start)*inner*elem, cnt*inner*elem, out.pieces)
		}
		return out.compact(), true
	case ir.Transpose:
		x := args[0]
		perm := n.Attrs.Ints("perm")
		r := len(perm)
		if r != x.t.Shape.Rank() || t.DType.Quantized() {
			return nil, false
		}
		src := x.bytes()
		elem := elemBytes(t.DType)
		inStr := x.t.Shape.Strides()
		dst := make([]byte, len(src))
		coord := make([]int, r)
		for i := 0; i < t.Shape.NumElements(); i++ {
			p := 0
			for k := 0; k < r; k++ {
				p += coord[k] * inStr[perm[k]]
			}
			copy(dst[i*elem:(i+1)*elem], src[p*elem:(p+1)*elem])
			for k := r - 1; k >= 0; k-- {
				coord[k]++
				if coord[k] < t.Shape[k] {
					break
				}
				coord[k] = 0
			}
		}
		return &blob{t: t, pieces: [][]byte{dst}}, true
	case ir.Cast:
		x := args[0]
		if !x.t.DType.IsFloat() || !t.DType.IsFloat() {
			return nil, false
		}
		if x.t.DType == t.DType {
			return &blob{t: t, pieces: x.pieces}, true
		}
		in := x.tensor()
		out := ir.NewTensor(t)
		for i := 0; i < t.Shape.NumElements(); i++ {
			out.SetFloat64(i, in.Float64(i))
		}
		return blobOf(out), true
	}
	return nil, false
}

// splitShape is (product of dims before ax, dim ax, product of dims after ax).
func splitShape(s ir.Shape, ax int) (outer, m, inner int) {
	outer, inner = 1, 1
	for _, d := range s[:ax] {
		outer *= d
	}
	for _, d := range s[ax+1:] {
		inner *= d
	}
	return outer, s[ax], inner
}

// elemBytes is the size of one element of d in ir's encoding (bool: one byte); d is not
// block-quantized.
func elemBytes(d ir.DType) int { return d.Size() }

// deviceBlob is b in device memory's form: bool elements widened to u32.
func deviceBlob(b *blob) *blob {
	if b.t.DType != ir.Bool {
		return b
	}
	src := b.bytes()
	out := make([]byte, 4*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return &blob{t: b.t, pieces: [][]byte{out}}
}
