package ir

import (
	"fmt"
	"strings"
)

// Op identifies an operation. The table opTable gives each its name, arity, attributes and
// shape/dtype inference; adding an op means adding a constant and a table row (and a reference
// implementation in ir/interp, whose tests fail for an op without one).
type Op uint16

const (
	InvalidOp Op = iota

	// Sources. Their Node carries Name (and Value for Const) and the type in Outs[0].
	Input // a function input
	Param // a model parameter (weight)
	State // persistent state (a KV cache) as it was when the run started
	Const // a constant tensor

	// Elementwise unary.
	Neg
	Abs
	Exp
	Log
	Sqrt
	Rsqrt
	Recip
	Sin
	Cos
	Tanh
	Erf // the error function; gelu's composition needs it (no primitive composition exists)
	Sigmoid
	Silu
	Relu
	Gelu     // erf form: x·Φ(x)
	GeluTanh // tanh approximation
	Cast     // attribute to: the target dtype

	// Elementwise binary with NumPy broadcasting.
	Add
	Sub
	Mul
	Div
	Maximum
	Minimum
	Pow
	Eq // comparisons give Bool
	Ne
	Lt
	Le
	Gt
	Ge
	Where // where(cond, a, b)

	// Reductions over one axis.
	Sum
	Mean
	Max
	Min
	Argmax // gives I32

	Softmax
	RMSNorm   // rmsnorm(x, w): x / sqrt(mean(x²) + eps) · w over the last axis
	LayerNorm // layernorm(x, w, b): (x - mean) / sqrt(var + eps) · w + b over the last axis

	Matmul // matmul(a, b), batched with broadcast batch dims; ta/tb transpose the last two axes
	Linear // linear(x, W[, b]) = x·Wᵀ + b with W [out, in]

	Reshape
	Transpose // attribute perm
	Slice     // one axis: start, end, step
	Concat
	Expand // broadcast to attribute shape

	Embedding // embedding(table [n, d], ids int[...]) -> [..., d]

	// Rope rotates pairs of the last axis by angle (pos + s)·theta^(-2i/d) where s is the index
	// along seq_axis and pos a run-time i32 scalar; mode "half" (rotate-half, Llama/HF) or
	// "interleaved" (pairs 2i, 2i+1).
	Rope
	// CacheWrite(state, x, pos) is state with rows pos..pos+len(x) along axis 0 replaced by x.
	// It is functional in the IR; the compiler performs it in place.
	CacheWrite
	// Attention(q, k, v[, kv_len]) with q [sq, hq, d], k [skv, hkv, d], v [skv, hkv, dv]
	// (layout "shd"; "hsd" puts heads first; k_layout and v_layout, when given, are k's and v's
	// own, k's may be "hds" [hkv, d, skv]: attnlayout.go) and hq a multiple of hkv (grouped-query heads).
	// Query i sits at absolute position kv_len - sq + i; causal masks keys after it, window > 0
	// keeps only the last window keys up to it, and keys at or past kv_len are ignored.
	// kv_len is a run-time i32 scalar; without it all skv keys are valid.
	Attention
	// Rows of several sequences in one run (ops_rows.go): a batched decode step advances rows
	// that belong to different sequences, each at its own position, in a KV cache with a slot
	// dimension [slots, ctx, ...]. RopeRows(x, pos) rotates row r at position pos[r];
	// CacheScatter(state, x, slot, pos) writes row r at state[slot[r], pos[r]];
	// AttentionRows(q, k, v, slot, pos) lets row r attend keys 0..pos[r] of sequence slot[r].
	RopeRows
	CacheScatter
	AttentionRows
	Conv1d // conv1d(x [cin, L] or [n, cin, L], w [cout, cin/groups, k][, b [cout]])

	// Vision ops (ops_vision.go): 2-D convolution and pooling over [n, c, h, w] (layout nchw)
	// or [n, h, w, c] (layout nhwc) activations, and batch normalisation in inference form.
	Conv2d        // conv2d(x, w [cout, cin/groups, kh, kw][, b [cout]])
	MaxPool2d     // max_pool2d(x): kernel, strides, pads, dilations, ceil_mode
	AvgPool2d     // avg_pool2d(x): as max_pool2d, and count_include_pad
	GlobalAvgPool // global_avg_pool(x): the mean over h and w, keeping them as 1
	BatchNorm     // batch_norm(x, scale, bias, mean, var): (x − mean)·scale/√(var + eps) + bias per channel

	Reverse // reverse(x): the elements of one axis in reverse order (a slice with a negative step)

	// ArgTopK(x) gives the indices (i32) of the k largest elements of each row of the last axis,
	// largest first: [..., n] → [..., k]; equal values in index order, a NaN larger than every
	// number (as argmax). Sampling reads the candidates of a logits row through it.
	ArgTopK
	// TakeAlongAxis(x, idx) gathers along the last axis: out[..., j] = x[..., idx[..., j]]
	// (numpy's take_along_axis), x [..., n] and idx int [..., k] with the same leading axes.
	TakeAlongAxis

	// Mixture of experts (ops_moe.go): a router's logits choose k of E experts per row
	// (MoeRoute), each chosen expert's matrix of a stack [E, out, in] multiplies the row
	// (MoeLinear: a gather of experts, so the work follows k, not E), and the k results are
	// summed with the routing weights (MoeSum).
	MoeRoute
	MoeLinear
	MoeSum

	numBaseOps
)

// Kind groups ops for kernel templates and rules.
type Kind uint8

const (
	KindSource Kind = iota + 1
	KindUnary
	KindBinary
	KindCompare
	KindSelect
	KindReduce
	KindNorm
	KindMatmul
	KindLayout
	KindOther
)

// OpInfo describes an op.
type OpInfo struct {
	Name    string
	Kind    Kind
	MinArgs int
	MaxArgs int
	Attrs   []AttrSpec
	// Composite ops also exist as compositions of primitives (see Decompose).
	Composite bool
	// Fused ops are introduced by rewrite rules, never written in models (see fused.go).
	Fused bool
	// WeightArgs lists the arguments that may be block-quantized weights (a linear's W, an
	// embedding's table); AllWeightArgs lets every argument be one (concat merges weights).
	// Infer rejects a block-quantized argument anywhere else.
	WeightArgs    []int
	AllWeightArgs bool
	// CacheArgs lists the arguments that may be a block-quantized KV cache: a state in one of
	// the formats vkc quantizes itself (DType.CacheFormat: q8_0, q4_0), written by cache_write
	// and read by attention.
	CacheArgs []int
	// infer computes the output types from the (checked) attributes and argument types.
	infer func(a Attrs, args []Type) ([]Type, error)
}

var opTable = map[Op]*OpInfo{}
var opByName = map[string]Op{}

func def(op Op, info OpInfo) {
	if _, dup := opTable[op]; dup {
		panic("ir: op defined twice: " + info.Name)
	}
	if _, dup := opByName[info.Name]; dup {
		panic("ir: op name defined twice: " + info.Name)
	}
	opTable[op] = &info
	opByName[info.Name] = op
}

// Info returns the op's description; it panics for an undefined op (a bug, not an input error).
func (op Op) Info() *OpInfo {
	if i, ok := opTable[op]; ok {
		return i
	}
	panic(fmt.Sprintf("ir: undefined op %d", op))
}

func (op Op) String() string {
	if i, ok := opTable[op]; ok {
		return i.Name
	}
	return fmt.Sprintf("op(%d)", op)
}

// LookupOp finds an op by its model.yaml name.
func LookupOp(name string) (Op, bool) {
	op, ok := opByName[name]
	return op, ok
}

// Ops lists every defined op in numeric order.
func Ops() []Op {
	var ops []Op
	for op := Op(1); op < numOps; op++ {
		if _, ok := opTable[op]; ok {
			ops = append(ops, op)
		}
	}
	return ops
}

// IsElementwise reports whether op maps broadcast inputs to outputs element by element.
func (op Op) IsElementwise() bool {
	switch op.Info().Kind {
	case KindUnary, KindBinary, KindCompare, KindSelect:
		return true
	}
	return false
}

// Infer checks attributes and argument types and returns the output types. Errors describe the
// problem without naming the op's position; callers add that.
func Infer(op Op, a Attrs, args []Type) (Attrs, []Type, error) {
	info, ok := opTable[op]
	if !ok {
		return nil, nil, fmt.Errorf("undefined op %d", op)
	}
	if len(args) < info.MinArgs || len(args) > info.MaxArgs {
		want := fmt.Sprint(info.MinArgs)
		if info.MaxArgs != info.MinArgs {
			want = fmt.Sprintf("%d to %d", info.MinArgs, info.MaxArgs)
		}
		return nil, nil, fmt.Errorf("%s takes %s arguments, got %d", info.Name, want, len(args))
	}
	a, err := checkAttrs(op, a)
	if err != nil {
		return nil, nil, err
	}
	if err := checkWeightArgs(info, args); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", info.Name, err)
	}
	outs, err := info.infer(a, args)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", info.Name, err)
	}
	return a, outs, nil
}

// checkWeightArgs enforces that block-quantized tensors appear only where the op takes a weight
// (OpInfo.WeightArgs), with a shape their blocks tile.
func checkWeightArgs(info *OpInfo, args []Type) error {
	for i, t := range args {
		if !t.DType.Quantized() {
			continue
		}
		ok := info.AllWeightArgs
		for _, w := range info.WeightArgs {
			ok = ok || w == i
		}
		for _, w := range info.CacheArgs {
			ok = ok || w == i && t.DType.CacheFormat()
		}
		if !ok {
			what := "no argument"
			if len(info.WeightArgs) > 0 {
				var n []string
				for _, w := range info.WeightArgs {
					n = append(n, fmt.Sprint(w+1))
				}
				what = "only argument " + strings.Join(n, ", ")
			}
			return fmt.Errorf("argument %d is %s, a block-quantized weight; %s takes %s as a quantized weight (dequantize with cast first)", i+1, t, info.Name, what)
		}
		if err := t.CheckBlocks(); err != nil {
			return fmt.Errorf("argument %d: %w", i+1, err)
		}
	}
	return nil
}
