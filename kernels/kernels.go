// Package kernels holds vkc's kernel templates: for each op (or fused op) a Go builder of codegen
// kernels plus a declared tuning space. The lowering stage turns a graph into Problems, asks the
// registry which templates accept each, and builds a Launch for a Config; the generic tuner
// (package lower) searches a template's Space without knowing which op it serves.
//
// Contracts every template keeps:
//   - Bindings: a Step names, for each storage buffer of its kernel in binding order, the operand
//     it reads or writes (an argument, a result, or a scratch buffer of the Launch). Operands are
//     dense, row-major tensors bound at an offset aligned to Caps.MinStorageOffsetAlign.
//   - Run-time scalars (a decode position, a KV length) are ordinary i32 operands that kernels
//     load from their buffer, so a plan's command buffer is recorded once and never patched.
//   - Grids are sized at build time for the largest case; work that depends on a run-time scalar
//     returns early for the rest. A problem of a function with a run-time length (Problem.Rows,
//     see length.go) runs on a prefix of its rows: a step that walks those rows in order
//     declares how its grid shrinks with the length (Step.Scale, issued as an indirect
//     dispatch), and an op whose meaning depends on the length reads it (the Len operand; only
//     templates with ReadsLength are offered such a problem).
//   - Arithmetic on f16 tensors is done in f32 (16-bit storage only), so a template needs
//     Caps.Storage16 for f16 operands but never shaderFloat16.
//   - bool tensors live in device memory as u32 (0 or 1).
package kernels

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// Caps are the device facts templates depend on. The lowering stage fills them from the runtime's
// device description (kernels does not import runtime); tests use Lavapipe.
type Caps struct {
	// CPU says the device is a CPU implementation (lavapipe): a few templates' static choices
	// differ there (Template.Static).
	CPU                bool
	SubgroupSize       int  // 0 when unknown
	SubgroupArithmetic bool // subgroup add/min/max
	SubgroupShuffle    bool // shuffle and shuffle-xor
	Float16            bool // shaderFloat16 (f16 arithmetic)
	Storage16          bool // 16-bit storage buffer access
	MaxSharedBytes     int
	MaxInvocations     int
	MaxWorkgroupSize   [3]int
	MaxGroups          [3]int // maxComputeWorkGroupCount
	// MinStorageOffsetAlign is minStorageBufferOffsetAlignment: operands start at multiples of it.
	MinStorageOffsetAlign int
	// Memory limits a compiled plan must keep (0: unknown, not checked): MaxAllocation is
	// maxMemoryAllocationSize (each of the weight, state and arena regions is one allocation),
	// MaxBindingRange maxStorageBufferRange (every binding), DeviceMemory the largest
	// device-local heap (all regions together).
	MaxAllocation, MaxBindingRange, DeviceMemory uint64
	// VulkanMemoryModel is the vulkanMemoryModel feature (every cooperative-matrix kernel needs it).
	VulkanMemoryModel bool
	// CoopShapes are the cooperative-matrix products the device runs at subgroup scope
	// (VK_KHR_cooperative_matrix's properties; empty without the extension).
	CoopShapes []CoopShape
	// Coop2 is VK_NV_cooperative_matrix2 with workgroup-scope matrices, flexible dimensions and
	// tensor addressing (nil where the device lacks any of them, or has no workgroup-scope
	// entry of element types codegen has).
	Coop2 *Coop2Caps
	// BFloat16 and BFloat16Matrix are VK_KHR_shader_bfloat16's bfloat16 type (storage and
	// conversions) and bfloat16 cooperative matrices.
	BFloat16, BFloat16Matrix bool
	// EmulateMatrices builds the cooperative-matrix templates with codegen's emulated matrices
	// (Builder.EmulateMatrices), for tests on devices without them: CoopShapes then says which
	// products to pretend the device has. Never set by the runtime's description of a device.
	EmulateMatrices bool
	// IntegerDot is shaderIntegerDotProduct (SPV_KHR_integer_dot_product's SDot on packed
	// 4x8-bit words).
	IntegerDot bool
	// Int8 is the compile's policy on 8-bit activations for integer dot products (a choice of
	// the user's, not a device fact; Int8Off unless the compile asks).
	Int8 Int8Mode
}

// CoopShape is one cooperative-matrix product a device runs: an M×K matrix of A times a K×N
// matrix of B plus an M×N accumulator of C, giving Result; the element types are codegen scalars
// (F16, BF16, F32, I32, U32).
type CoopShape struct {
	M, N, K         int
	A, B, C, Result codegen.Type
}

// Coop2Caps describes VK_NV_cooperative_matrix2 for templates using workgroup-scope matrices.
type Coop2Caps struct {
	MaxWorkgroupSize int          // invocations of a workgroup using workgroup-scope matrices
	MaxDimension     int          // cooperativeMatrixFlexibleDimensionsMaxDimension
	ReservedShared   int          // shared memory the driver keeps for its staging, bytes
	Shapes           []Coop2Shape // the workgroup-scope entries whose element types codegen has
}

// Coop2Shape is one workgroup-scope flexible-dimensions entry: M, N and K must be multiples of
// the granularities, and the workgroup has Invocations invocations.
type Coop2Shape struct {
	MGran, NGran, KGran int
	A, B, C, Result     codegen.Type
	Invocations         int // workgroupInvocations
}

func (s CoopShape) String() string {
	return fmt.Sprintf("%dx%dx%d %s*%s+%s->%s", s.M, s.N, s.K, s.A, s.B, s.C, s.Result)
}

// CoopShape returns the device's product of a·b accumulated in c (and returned as c), preferring
// the largest M·N·K, or false when it has none.
func (c Caps) CoopShape(a, b, acc codegen.Type) (CoopShape, bool) {
	var best CoopShape
	ok := false
	for _, s := range c.CoopShapes {
		if s.A == a && s.B == b && s.C == acc && s.Result == acc && (!ok || s.M*s.N*s.K > best.M*best.N*best.K) {
			best, ok = s, true
		}
	}
	return best, ok
}

// Lavapipe is Mesa's CPU implementation as seen on Debian 12 (subgroup size 8, 32 KiB shared
// memory, no cooperative matrices); tests that build kernels without a device use it.
var Lavapipe = Caps{
	CPU: true, SubgroupSize: 8, SubgroupArithmetic: true, SubgroupShuffle: true, Float16: true, Storage16: true,
	MaxSharedBytes: 32768, MaxInvocations: 1024, MaxWorkgroupSize: [3]int{1024, 1024, 1024},
	MaxGroups: [3]int{65535, 65535, 65535}, MinStorageOffsetAlign: 16, VulkanMemoryModel: true,
	MaxAllocation: 2 << 30, MaxBindingRange: 128 << 20, DeviceMemory: 2 << 30,
}

// H200 is the NVIDIA H200 with driver 580 as `vkc devices` lists it (docs/bench/smollm2-static.txt):
// subgroups of 32, 48 KiB shared memory, and cooperative matrices, f16 and bf16 (the 8-bit integer
// shapes are left out: codegen has no 8-bit type). Tests use it to
// build and validate the cooperative-matrix kernels on machines without such a device; the bfloat16
// features are assumed (vkc devices did not list them then).
var H200 = Caps{
	SubgroupSize: 32, SubgroupArithmetic: true, SubgroupShuffle: true, Float16: true, Storage16: true,
	MaxSharedBytes: 49152, MaxInvocations: 1024, MaxWorkgroupSize: [3]int{1024, 1024, 64},
	MaxGroups: [3]int{2147483647, 65535, 65535}, MinStorageOffsetAlign: 16, VulkanMemoryModel: true,
	CoopShapes: []CoopShape{
		{16, 16, 16, codegen.F16, codegen.F16, codegen.F16, codegen.F16},
		{16, 8, 16, codegen.F16, codegen.F16, codegen.F16, codegen.F16},
		{16, 8, 8, codegen.F16, codegen.F16, codegen.F16, codegen.F16},
		{16, 16, 16, codegen.F16, codegen.F16, codegen.F32, codegen.F32},
		{16, 8, 16, codegen.F16, codegen.F16, codegen.F32, codegen.F32},
		{16, 8, 8, codegen.F16, codegen.F16, codegen.F32, codegen.F32},
		{16, 16, 16, codegen.BF16, codegen.BF16, codegen.F32, codegen.F32},
	},
	BFloat16: true, BFloat16Matrix: true,
	MaxAllocation: 4094 << 20, MaxBindingRange: 1<<32 - 1, DeviceMemory: 140 << 30,
}

// Supports reports whether the device has the features kernel k declares.
func (c Caps) Supports(k *codegen.Kernel) error {
	var missing []string
	need := func(f codegen.Feature, have bool, name string) {
		if k.Needs.Has(f) && !have {
			missing = append(missing, name)
		}
	}
	need(codegen.FeatureFloat16, c.Float16, "shaderFloat16")
	need(codegen.FeatureStorageBuffer16, c.Storage16, "storageBuffer16BitAccess")
	need(codegen.FeatureSubgroupArithmetic, c.SubgroupArithmetic, "subgroup arithmetic")
	need(codegen.FeatureSubgroupShuffle, c.SubgroupShuffle, "subgroup shuffle")
	need(codegen.FeatureSubgroupBallot, c.SubgroupShuffle, "subgroup ballot/broadcast")
	need(codegen.FeatureCooperativeMatrix, len(c.CoopShapes) > 0, "cooperative matrices")
	need(codegen.FeatureVulkanMemoryModel, c.VulkanMemoryModel, "the Vulkan memory model")
	need(codegen.FeatureCooperativeMatrix2, c.Coop2 != nil || c.EmulateMatrices, "workgroup-scope cooperative matrices with tensor addressing (VK_NV_cooperative_matrix2)")
	need(codegen.FeatureBFloat16, c.BFloat16, "bfloat16")
	need(codegen.FeatureBFloat16Matrix, c.BFloat16Matrix, "bfloat16 cooperative matrices")
	need(codegen.FeatureIntegerDot, c.IntegerDot, "integer dot products (shaderIntegerDotProduct)")
	if len(missing) > 0 {
		return fmt.Errorf("kernel %s needs %s", k.Name, strings.Join(missing, ", "))
	}
	return nil
}

// FusedElementwise is the Problem op of a group of elementwise ops computed in one kernel; its
// computation is Problem.Expr. (It is not an ir op: no model or rule writes it.)
const FusedElementwise ir.Op = 0xffff

// Problem is one unit of work for a template: an op with its operand and result types.
type Problem struct {
	Op    ir.Op
	Attrs ir.Attrs
	Args  []ir.Type // the op's operands, then the epilogue's extra inputs (see Expr)
	Outs  []ir.Type // the op's results; with an epilogue, Outs[0] is the epilogue's result
	// Expr is the computation of a FusedElementwise problem (Args are its inputs, Outs its
	// outputs), or for any other op an optional epilogue applied to result 0 element by element:
	// the epilogue's input 0 is the op's value, its inputs 1.. are Args[NumOpArgs:], broadcast
	// to Outs[0].Shape.
	Expr *Fused
	// NumOpArgs is the number of Args that belong to the op itself (the rest feed the epilogue).
	NumOpArgs int
	// Rows, when not nil, says that the problem runs on a run-time prefix of its rows (see Rows).
	Rows *Rows
	// Parts, for a linear or rmsnorm_linear, cut the op's result columns into ranges that are
	// written to results of their own, each through its own epilogue (parts.go); Outs are then
	// the parts' results, and Args after the op's own the position Args[Pos] (when a part reads
	// it) and the states that cache parts update.
	Parts []Part
	Pos   int
	// RowPos says that Args[Pos] holds one position per row (i32[rows]: a batched step's
	// rope_rows and cache_scatter, ir/ops_rows.go) rather than the first row's: a rope part
	// rotates row r by pos[r], and a cache part writes row r at state[slot[r], pos[r]] of a
	// [slots, ctx, ...] state, Args[Slot] holding each row's slot (i32[rows]).
	RowPos bool
	Slot   int
}

// OpName names the problem's op for messages and keys.
func (p *Problem) OpName() string {
	if p.Op == FusedElementwise {
		return "elementwise"
	}
	return p.Op.String()
}

// Key identifies the problem for the tuning database: op, attributes, types and fused expression.
// Equal keys mean the same kernel computes both.
func (p *Problem) Key() string {
	var b strings.Builder
	b.WriteString(p.OpName())
	if k := p.Attrs.Key(); k != "" {
		b.WriteString("[" + k + "]")
	}
	b.WriteByte('(')
	for i, t := range p.Args {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.String())
	}
	b.WriteString(")->(")
	for i, t := range p.Outs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.String())
	}
	b.WriteByte(')')
	if p.Expr != nil {
		b.WriteString("{" + p.Expr.Key() + "}")
	}
	b.WriteString(p.Rows.key())
	b.WriteString(partsKey(p))
	return b.String()
}

// OperandKind says what a kernel binding refers to.
type OperandKind uint8

const (
	Arg     OperandKind = iota + 1 // Problem.Args[Index]
	Out                            // Problem.Outs[Index]
	Scratch                        // Launch.Scratch[Index]
	// Len is the run-time length n of a problem with Rows (an i32 scalar; Index 0).
	Len
	// Sync is Launch.Sync[Index]: words that are zero when the launch starts and that it
	// leaves zero (counters at which its workgroups meet).
	Sync
)

// Operand is what one kernel binding is bound to.
type Operand struct {
	Kind  OperandKind
	Index int
}

func (o Operand) String() string {
	return [...]string{"?", "arg", "out", "scratch", "len", "sync"}[o.Kind] + strconv.Itoa(o.Index)
}

// Step is one dispatch of a Launch.
type Step struct {
	Kernel   *codegen.Kernel
	Spec     []uint32  // specialization constant values by SpecId (nil: the kernel's defaults)
	Grid     [3]uint32 // workgroups
	Bindings []Operand // one per kernel binding, in binding order
	Push     []byte    // push-constant bytes (static: shapes, strides)
	// Scale, for a problem with Rows, says how the grid shrinks with the run-time length; nil
	// keeps the full grid.
	Scale *GridScale
}

// Launch is a template's realisation of a Problem: one or more dispatches run in order (with a
// barrier between dependent steps), plus scratch buffers they share.
type Launch struct {
	Steps   []Step
	Scratch []int // byte sizes of scratch buffers
	// Sync are the byte sizes of buffers of u32 counters that must be zero when the launch
	// starts and that the launch leaves zero (its workgroups count their arrivals there, and the
	// last resets the count). Lowering keeps them in persistent memory that is zeroed when a
	// plan is loaded (the state region, past its tensors); the tuner zeroes them once.
	Sync []int
	// InPlace lists results that must share their buffer with an argument (a cache write that
	// writes only the new rows of the state it updates): Out index → Arg index.
	InPlace map[int]int
	// Flops and Bytes are the work done and the minimum bytes moved, for roofline estimates and
	// the achieved-throughput columns of vkc bench.
	Flops, Bytes float64
	// Tolerance, when positive, is the error the launch's results may have against the
	// interpreter, relative to each row's largest magnitude, beyond the dtype's rounding: a
	// kernel that rounds its inputs on purpose (8-bit activations, Int8KernelTolerance;
	// matmul_coop's f16 roundings of a product's terms, coopTolerance). The
	// tuner checks the launch at the larger of it and the dtype's tolerance.
	Tolerance float64
	// Matrix says that the launch's products run on cooperative matrices (tensor cores), so a
	// roofline estimate uses the device's matrix rate for Flops.
	Matrix bool
	// MatrixRate, when positive, is the share of the device's matrix rate the launch's products
	// reach where something besides the tensor work bounds them (matmul_coop decoding a
	// block-quantized B as it stages it: coopQuantRate). 0 means all of it.
	MatrixRate float64
	// Occupancy, when positive, is the number of invocations that do the launch's main work, for
	// a roofline's occupancy term, where that is not its largest step (matmul_coop_dq's
	// dequantization starts an invocation per 8 weights, its product far fewer). 0: the
	// largest step's invocations.
	Occupancy float64
}

// Invocations is the number of invocations the step starts.
func (s Step) Invocations() float64 {
	n := float64(s.Grid[0]) * float64(s.Grid[1]) * float64(s.Grid[2])
	if s.Kernel != nil {
		wg := s.Kernel.WorkgroupSizeFor(s.Spec)
		n *= float64(wg[0]) * float64(wg[1]) * float64(wg[2])
	}
	return n
}

// Template is a kernel template: which problems it accepts, its tuning space, and its builder.
type Template struct {
	Name string
	// Accepts returns nil when the template can implement p on the device (for some point of its
	// space), else an error saying why not.
	Accepts func(p *Problem, caps Caps) error
	Space   Space
	// Static, when set, proposes the configurations a compile that does not measure tries
	// first, in order, for a problem on a device (Build); the space's first valid point follows.
	Static func(p *Problem, caps Caps) []Config
	// Quantized lists the block-quantized weight dtypes (ir.Q8_0, ir.Q4_K, …) the template
	// reads. For offers it no problem with a block-quantized operand of another dtype, so a
	// template written for f32/f16 never sees (and misreads) ggml's blocks; the lowering stage
	// then dequantizes such a weight at compile time (lower's dequantization fallback).
	Quantized []ir.DType
	// Build realises p at configuration c. It may reject a configuration the space's predicates
	// let through (an error naming the parameter); the tuner records it as invalid.
	Build func(p *Problem, c Config, caps Caps) (*Launch, error)
	// ReadsLength says that Build implements Rows.Reads: it binds the Len operand and gives the
	// op its meaning at the run-time length. For offers a problem whose meaning depends on the
	// length only to such templates.
	ReadsLength bool
}

var registry []*Template

// Register adds a template; templates register themselves in init. Names are unique.
func Register(t *Template) {
	for _, u := range registry {
		if u.Name == t.Name {
			panic("kernels: template registered twice: " + t.Name)
		}
	}
	if t.Accepts == nil || t.Build == nil {
		panic("kernels: template " + t.Name + " lacks Accepts or Build")
	}
	registry = append(registry, t)
}

// Templates lists every registered template, sorted by name.
func Templates() []*Template {
	out := append([]*Template(nil), registry...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// For returns the templates that accept p, sorted by name, or an error listing why each
// template that serves p's op refused.
func For(p *Problem, caps Caps) ([]*Template, error) {
	var ok []*Template
	var why []string
	var quantWhy error
	for _, t := range Templates() {
		// Checked before Accepts, which a template written for float operands may not be
		// ready to see ggml's blocks in.
		if err := t.readsQuantized(p); err != nil {
			quantWhy = err
			continue
		}
		if p.Rows != nil && p.Rows.Reads && !t.ReadsLength {
			if t.Accepts(p, caps) == nil {
				why = append(why, t.Name+": does not read the run-time length, which this op's meaning depends on")
			}
			continue
		}
		if err := t.Accepts(p, caps); err != nil {
			if !errors.Is(err, ErrOtherOp) {
				why = append(why, t.Name+": "+err.Error())
			}
			continue
		}
		ok = append(ok, t)
	}
	if len(ok) == 0 {
		if len(why) == 0 && quantWhy != nil {
			return nil, fmt.Errorf("no kernel template implements %s: %v", p.Key(), quantWhy)
		}
		if len(why) == 0 {
			return nil, fmt.Errorf("no kernel template implements %s", p.Key())
		}
		return nil, fmt.Errorf("no kernel template implements %s: %s", p.Key(), strings.Join(why, "; "))
	}
	return ok, nil
}

// readsQuantized rejects a problem with a block-quantized operand the template does not list in
// Quantized.
func (t *Template) readsQuantized(p *Problem) error {
	for i, a := range p.Args {
		if !a.DType.Quantized() {
			continue
		}
		ok := false
		for _, d := range t.Quantized {
			ok = ok || d == a.DType
		}
		if !ok {
			return fmt.Errorf("operand %d is %s, and no template of this op reads %s weights", i+1, a, a.DType)
		}
	}
	return nil
}

// iterConcat yields a's values, then b's.
func iterConcat[V any](a, b iter.Seq[V]) iter.Seq[V] {
	return func(yield func(V) bool) {
		for v := range a {
			if !yield(v) {
				return
			}
		}
		for v := range b {
			if !yield(v) {
				return
			}
		}
	}
}

// ErrOtherOp is what Accepts returns (wrapped or not) for a problem of an op the template does
// not serve at all, so For does not list it among the reasons.
var ErrOtherOp = errors.New("not this template's op")

// BuildAt builds p with t at configuration c, checked against t's space, or at t's default
// (Build) when c is nil; it returns the configuration built.
func BuildAt(t *Template, p *Problem, c Config, caps Caps) (*Launch, Config, error) {
	if c == nil {
		return Build(t, p, caps)
	}
	if err := t.Space.Valid(p, c, caps); err != nil {
		return nil, c, err
	}
	l, err := t.Build(p, c, caps)
	return l, c, err
}

// Build realises p with template t at its default configuration (the first valid point).
func Build(t *Template, p *Problem, caps Caps) (*Launch, Config, error) {
	var firstErr error
	var first []Config
	if t.Static != nil {
		first = t.Static(p, caps)
	}
	// The space is walked one point at a time after the static choices: a big space has
	// thousands of points, and a compile asks for many problems' static choices.
	for c := range iterConcat(slices.Values(first), t.Space.All()) {
		if err := t.Space.Valid(p, c, caps); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		l, err := t.Build(p, c, caps)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		return l, c, nil
	}
	if firstErr == nil {
		firstErr = errors.New("empty tuning space")
	}
	return nil, nil, fmt.Errorf("template %s for %s: no valid configuration: %w", t.Name, p.Key(), firstErr)
}

// newBuilder starts a kernel for a device with caps: on a CPU implementation its loops are
// marked DontUnroll (codegen.Builder.DontUnrollLoops says why).
func newBuilder(name string, caps Caps) *codegen.Builder {
	b := codegen.NewBuilder(name)
	b.DontUnrollLoops(caps.CPU)
	return b
}
