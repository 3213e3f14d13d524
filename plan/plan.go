// Package plan is the compiled-plan data model and its binary file format.
//
// A Plan is what the compiler (lower) produces and what the runtime executes: SPIR-V modules, the
// memory layout (weights, persistent state, one arena for intermediates), and for each function its
// inputs, outputs and a fixed list of dispatches. It also records what the compiler decided (rules
// applied, kernels and configurations, candidates and their times) for `vkc inspect` and `vkc dot`.
// The package knows nothing of Vulkan and imports nothing from the project but internal/safefile
// (how output files are written).
//
// # Memory model
//
// Every buffer a kernel binds is a byte range of one Region:
//
//	weights    read-only, uploaded once at load (inline in the plan, or from an external file)
//	state      persistent across runs (KV caches); zero-filled at load and on reset
//	arena      intermediates; contents are undefined between runs
//	input i    the staging slot of input i of the running function (only if it is placed in Staging)
//	output i   the staging slot of output i of the running function (only if it is placed in Staging)
//
// A region larger than one device allocation may be is cut into several buffers (Split): offsets
// stay the region's, and nothing a dispatch binds crosses from one buffer into the next.
//
// An input or output lives either in a staging slot of its own (written by the host before the run,
// or read by the host after it) or in a range of the arena (the runtime copies it in before the first
// dispatch, or out after the last).
//
// # Run-time scalars, run-time lengths and grids
//
// Shapes are static capacities; what varies between runs (a decode position, a KV length, the
// number of prompt tokens) is a scalar on the device, so every function is recorded once into a
// reusable command buffer. A kernel reads a run-time scalar either from a buffer (bind the
// input's staging slot, and the command buffer stays unchanged between runs) or from push
// constants through a ScalarSlot, whose bytes the runtime must write per run (by re-recording the
// small push-constant command, or patching a secondary command buffer); which one a kernel uses
// is the compiler's choice and the plan says which.
//
// A function with a Length runs for any length n in Min..Max without being recompiled or
// re-recorded. Its buffers are sized for Max; the inputs and outputs marked Bounded carry
// n·Shape[0]/Max rows of their leading axis in a run (the caller passes and gets exactly those
// rows), and the runtime derives n from the bounded inputs' sizes. n reaches kernels two ways:
//
//   - RegionLength: a 4-byte region holding n as an i32, written by the runtime before each run,
//     which kernels bind like any scalar operand (an attention kernel places its queries at
//     kv_len − n + i; a cache write writes n rows).
//   - GridScale: a dispatch whose workgroups walk the rows of a bounded tensor shrinks its grid
//     with n (ceil(n·Num/Den) groups along one axis). The runtime issues such a dispatch with
//     vkCmdDispatchIndirect and writes the group counts, computed from n, into the indirect
//     buffer before each run, so a run at length n launches about the work of a plan compiled
//     for n while the command buffer stays as recorded.
//
// Rows of bounded intermediates past n are undefined (a partly filled workgroup computes some),
// and every kernel keeps rows independent, so they never reach a valid row, an output or the
// state.
//
// A dispatch without a GridScale keeps its grid: one that reads a run-time scalar is sized for
// the largest case (e.g. the full KV capacity) and the kernel returns early for the idle part.
//
// # Barriers
//
// Dispatches run in list order. A dispatch with BarrierBefore set waits for all earlier dispatches
// (a compute-to-compute memory barrier); dispatches between two barriers form an interval and may
// run concurrently. Validate rejects an interval in which one dispatch writes bytes that another
// reads or writes, so a missing barrier is caught before a device sees it. The runtime adds the
// host-to-device and device-to-host barriers at the start and end of a run itself.
//
// # File format
//
// The layout is described in format.go. All integers are little-endian; the bytes are a function of the Plan alone (maps
// are sorted, nothing records a time or a host), so the same Plan always encodes to the same file.
package plan

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Plan is a compiled model: everything the runtime needs to execute its functions on one device.
type Plan struct {
	// CompilerVersion names the vkc that wrote the plan (e.g. "vkc 0.3.0 (abc1234)"). Informational;
	// the format version is what decides whether a plan can be read.
	CompilerVersion string
	// Model is the model's name from model.yaml, for messages.
	Model string
	// Device is the device the plan was compiled and tuned for; see CheckDevice.
	Device Fingerprint

	Modules []Module

	Weights Weights
	// State holds the persistent tensors (e.g. KV caches) in the state region of StateSize bytes,
	// cut into device buffers by StateSplit.
	State      []StateTensor
	StateSize  uint64
	StateSplit Split
	Arena      Arena

	Functions []Function

	// Record is what the compiler decided and why; the runtime ignores it.
	Record Record

	// Tokenizer, when non-nil, is the language model's tokenizer (see Tokenizer).
	Tokenizer *Tokenizer
}

// Fingerprint identifies a Vulkan device and driver.
type Fingerprint struct {
	VendorID          uint32 // VkPhysicalDeviceProperties.vendorID
	DeviceID          uint32 // VkPhysicalDeviceProperties.deviceID
	DriverVersion     uint32 // VkPhysicalDeviceProperties.driverVersion (vendor-specific encoding)
	PipelineCacheUUID [16]byte
	DeviceName        string // for messages only; not compared
}

// Module is one SPIR-V compute shader with its interface.
type Module struct {
	// Key identifies the kernel template and its static parameters (op, shapes, dtypes, fused
	// prologue/epilogue); Config is the tuning configuration that produced this module. Both are
	// for the tuning database and `vkc inspect`; the runtime does not read them.
	Key    string
	Config map[string]int64

	SPIRV []uint32 // the module's words, starting with the SPIR-V magic number 0x07230203
	Entry string   // entry point name

	// Bindings are the storage buffers of descriptor set 0 the shader declares, by binding number.
	Bindings         []BindingDecl
	PushConstantSize uint32 // bytes, a multiple of 4; 0 if the shader has no push constants
	SpecConstants    []SpecConstant
	// Workgroup is the local size the module runs with (after specialization), for occupancy
	// figures and messages.
	Workgroup [3]uint32
}

// Access says how a shader uses a binding; it decides where barriers are needed.
type Access uint8

const (
	Read      Access = 1
	Write     Access = 2
	ReadWrite Access = 3
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "readwrite"
	}
	return "access(?)"
}

func (a Access) reads() bool  { return a&Read != 0 }
func (a Access) writes() bool { return a&Write != 0 }

// BindingDecl is one storage-buffer binding a module declares.
type BindingDecl struct {
	Binding uint32
	Access  Access
}

// SpecConstant is a specialization constant: its constant_id and its value as 32 raw bits (an i32,
// u32, f32 or bool is stored by its bit pattern, as VkSpecializationInfo takes it).
type SpecConstant struct {
	ID    uint32
	Value uint32
}

// Weights is the weight region: the model's parameters, read-only after load.
type Weights struct {
	Size    uint64 // bytes of the weight region
	Tensors []WeightTensor
	// Data is the region's bytes when the weights are inline (len(Data) == Size). It is nil when
	// Source is set, and when Pieces hold the inline region.
	Data []byte
	// Pieces, when Data and Source are nil, make up the inline region: byte ranges in memory or
	// in files, sorted by offset and not overlapping, with zeros between them. A compiler builds
	// the region this way so that the weights are written into the plan file from where they
	// already are (a memory-mapped or open weight file, a folded tensor) and never copied into one
	// buffer; the file form is the same as for Data, and a decoded plan has Data.
	Pieces []WeightPiece
	// Source, when non-nil, says that the weights are not in the plan: the runtime reads each
	// tensor's bytes verbatim from this file (at SourceOffset) into the region (at Offset).
	Source *Source
	// Split cuts the region into device buffers (format version 3); nil is one buffer.
	Split Split
}

// WeightPiece is one byte range of an inline weight region held outside Weights.Data: Data, or
// Size bytes of File at FileOffset, read when the plan is encoded or loaded.
type WeightPiece struct {
	Offset     uint64 // in the weight region
	Size       uint64
	Data       []byte // len(Data) == Size; nil when the bytes are read from File
	File       io.ReaderAt
	FileOffset int64
}

// Source is an external weight file (e.g. the model's safetensors file).
type Source struct {
	// Path as the compiler was given it; a relative path is resolved against the directory of the
	// plan file (see ResolveSource).
	Path   string
	Size   uint64   // file size in bytes
	SHA256 [32]byte // of the whole file; SHA-256 because it names the file's content across machines
}

// WeightTensor is one parameter in the weight region.
type WeightTensor struct {
	Name  string
	DType DType
	Shape []int64
	// Layout names a stored layout other than row-major (e.g. "transposed", "tiled16x16"), chosen
	// by the compiler; "" is row-major. External weights are copied verbatim and must be "".
	Layout string
	Offset uint64 // byte offset in the weight region
	Size   uint64 // stored bytes; at least the logical size (padding for a tiled layout is allowed)
	// SourceOffset is the tensor's byte offset in Source (external weights only; 0 when inline).
	SourceOffset uint64
}

// StateTensor is a persistent tensor in the state region. It keeps its contents between runs and
// is zeroed at load and by a reset.
type StateTensor struct {
	Name   string
	DType  DType
	Shape  []int64
	Offset uint64 // byte offset in the state region
}

// Arena is the region for intermediates, shared by all functions (one function runs at a time).
type Arena struct {
	Size  uint64
	Align uint64 // alignment of the arena's base the plan's offsets assume; a power of two, or 0 (1)
	// Split cuts the arena into device buffers (format version 3); nil is one buffer. Each
	// buffer's base is aligned to Align too.
	Split Split
}

// Function is one entry point of the model (e.g. "prefill", "decode").
type Function struct {
	Name       string
	Inputs     []Value
	Outputs    []Value
	Dispatches []Dispatch
	// Ranges are the bounds the function's integer inputs must keep, derived by the compiler
	// from the ops that consume them; the runtime checks them before every run (format
	// version 2).
	Ranges []Range
	// Length, when not nil, makes the function run for any length n in Length.Min..Max (see
	// the package comment); nil for a function of static shapes.
	Length *Length
	// Variants, of a function with a Length, are the same function compiled for smaller
	// capacities: each has a Length within this one's, the ranges disjoint, and the same inputs
	// and outputs (bounded ones with their variant's capacity). A run at length n uses the
	// variant whose range holds n, else this function, which serves every length: variants only
	// make short runs cheaper (a kernel that suits 8 rows, not a 512-row tile that runs 8). They
	// have no variants of their own.
	Variants []Function
}

// Length is a function's run-time length: its name in the model (e.g. "seq") and its bounds,
// 1 ≤ Min ≤ Max. Buffers are sized for Max.
type Length struct {
	Name     string
	Min, Max uint32
}

// Range bounds the values of an integer input as the ops that consume it require: an embedding
// index below the table's row count, a cache position with room for the rows written there, an
// attention length within the keys. Kernels do not check such values (a grid is fixed, a read
// is not bounds-checked), so a value outside makes them read or write outside their tensors and
// return plausible numbers where the interpreter reports an error; the runtime therefore checks
// every Range before it submits anything.
//
// For every element v of input Input, with s the sum of the scalar inputs Plus (and of the
// function's run-time length n when PlusLength is set),
//
//	Min ≤ v + s ≤ Max
//
// must hold (computed in 64 bits, so nothing wraps); NoMin and NoMax mark a missing bound. Plus
// is how a bound depends on another run-time scalar: a prefill with a run-time length n (1 ≤ n
// ≤ 16, the function's Length, checked by the runtime itself) that writes its n rows at position
// pos of a 128-row cache has the ranges {Input: pos, Min: 0, Max: NoMax} and {Input: pos,
// PlusLength: true, Min: NoMin, Max: 128}; with a static length 16 the second is pos ≤ 112.
//
// MinWhy and MaxWhy say which op needs the bound, for the error message.
type Range struct {
	Input          uint32   // index into the function's Inputs: an i32 or u32 tensor
	Plus           []uint32 // indices of i32 or u32 scalar inputs added to every element
	PlusLength     bool     // the run-time length n is added too (a function with a Length)
	Min, Max       int64
	MinWhy, MaxWhy string
}

// NoMin and NoMax are the Min and Max of a Range without that bound.
const (
	NoMin int64 = -1 << 63
	NoMax int64 = 1<<63 - 1
)

// Placement says where a function's input or output lives.
type Placement uint8

const (
	// Staging: a buffer of its own, the Input i / Output i region, sized exactly for the tensor.
	Staging Placement = 1
	// InArena: a byte range of the arena starting at Value.Offset.
	InArena Placement = 2
)

func (p Placement) String() string {
	switch p {
	case Staging:
		return "staging"
	case InArena:
		return "arena"
	}
	return "placement(?)"
}

// Value is an input or output of a function.
type Value struct {
	Name  string
	DType DType
	Shape []int64 // [] for a scalar
	Place Placement
	// Offset is the byte offset in the arena when Place is InArena; 0 otherwise.
	Offset uint64
	// Bounded says that the function's run-time length sets the leading axis: Shape[0] is a
	// multiple k·Length.Max and a run at length n passes (or returns) k·n rows.
	Bounded bool
}

// RowBytes is the size of the rows of a bounded value that one unit of the run-time length
// covers (k rows of Shape[0] = k·max); for an unbounded value it is its whole size.
func (v *Value) RowBytes(max uint32) (uint64, error) {
	n, err := v.Bytes()
	if err != nil || !v.Bounded || max == 0 {
		return n, err
	}
	return n / uint64(max), nil
}

// WithRows returns v as a run passes or returns it when its leading axis holds rows rows: for a
// bounded value, Shape[0] replaced by rows and Bounded cleared; v itself otherwise. rows must be
// in 1..Shape[0] (the runtime further checks it is k·n for a length n in range).
func (v Value) WithRows(rows int64) (Value, error) {
	if !v.Bounded {
		return v, nil
	}
	if len(v.Shape) == 0 || rows < 1 || rows > v.Shape[0] {
		limit := int64(0)
		if len(v.Shape) > 0 {
			limit = v.Shape[0]
		}
		return Value{}, fmt.Errorf("%s: %d rows for %s%v, whose leading axis holds 1 to %d in a run", v.Name, rows, v.DType, v.Shape, limit)
	}
	v.Shape = append([]int64{rows}, v.Shape[1:]...)
	v.Bounded = false
	return v, nil
}

// RowOf returns the size of one row of v's leading axis (its size for a scalar), for finding
// how many rows a bounded value's bytes or elements hold.
func (v *Value) RowOf() (bytes, elements uint64, err error) {
	n, err := v.Bytes()
	if err != nil {
		return 0, 0, err
	}
	e, err := Elements(v.Shape)
	if err != nil {
		return 0, 0, err
	}
	if len(v.Shape) == 0 || v.Shape[0] == 0 {
		return n, uint64(e), nil
	}
	return n / uint64(v.Shape[0]), uint64(e) / uint64(v.Shape[0]), nil
}

// RegionKind is the kind of memory a buffer reference points into.
type RegionKind uint8

const (
	RegionWeights RegionKind = 1
	RegionState   RegionKind = 2
	RegionArena   RegionKind = 3
	RegionInput   RegionKind = 4 // staging slot of input Region.Index
	RegionOutput  RegionKind = 5 // staging slot of output Region.Index
	// RegionLength holds the run-time length n of a function with a Length, as an i32 at byte 0
	// (4 bytes), written by the runtime before each run.
	RegionLength RegionKind = 6
)

// Region names one region; Index is the input or output index for RegionInput and RegionOutput and
// 0 otherwise.
type Region struct {
	Kind  RegionKind
	Index uint32
}

func (r Region) String() string {
	switch r.Kind {
	case RegionWeights:
		return "weights"
	case RegionState:
		return "state"
	case RegionArena:
		return "arena"
	case RegionInput:
		return "input" + strconv.FormatUint(uint64(r.Index), 10)
	case RegionOutput:
		return "output" + strconv.FormatUint(uint64(r.Index), 10)
	case RegionLength:
		return "length"
	}
	return "region(?)"
}

// BufferRef is a byte range of a region, as a descriptor binds it.
type BufferRef struct {
	Region Region
	Offset uint64
	Range  uint64 // bytes, > 0
}

// Binding binds a buffer range to one of the module's declared bindings.
type Binding struct {
	Binding uint32
	Buffer  BufferRef
}

// ScalarSlot says that 4 bytes of a dispatch's push constants come from a scalar input at run
// time: bytes [Offset, Offset+4) hold input Input (an i32 or u32 scalar) plus Add, wrapping as
// 32-bit two's-complement arithmetic. For example, a decode step's KV length is {Offset: 4, Input:
// pos, Add: 1}.
type ScalarSlot struct {
	Offset uint32
	Input  uint32 // index into the function's Inputs
	Add    int32
}

// GridScale says how a dispatch's grid follows the run-time length n of its function: along grid
// axis Axis the workgroup count is ceil(n·Num/Den), never more than Grid's; the other axes keep
// theirs. Axis LinearAxis is for a grid laid out by kernels.Grid1D, whose linear workgroup index
// x + y·gridX is split over x and y: the count is then g = ceil(n·Num/Den) linear groups,
// issued as min(g, Grid[0]) × ceil(g/Grid[0]).
type GridScale struct {
	Axis     uint8 // 0, 1, 2 or LinearAxis
	Num, Den uint32
}

// LinearAxis is GridScale.Axis for a linear (Grid1D) grid.
const LinearAxis = 3

// Groups returns the grid for length n.
func (s *GridScale) Groups(grid [3]uint32, n uint32) [3]uint32 {
	if s == nil || s.Den == 0 {
		return grid
	}
	g := (uint64(n)*uint64(s.Num) + uint64(s.Den) - 1) / uint64(s.Den)
	g = max(g, 1)
	if s.Axis == LinearAxis {
		total := uint64(grid[0]) * uint64(grid[1])
		g = min(g, total)
		x := min(g, uint64(grid[0]))
		y := (g + x - 1) / x
		return [3]uint32{uint32(x), uint32(min(y, uint64(grid[1]))), grid[2]}
	}
	if s.Axis > 2 {
		return grid
	}
	out := grid
	out[s.Axis] = uint32(min(g, uint64(grid[s.Axis])))
	return out
}

// Dispatch is one vkCmdDispatch of a module.
type Dispatch struct {
	Module   uint32 // index into Plan.Modules
	Bindings []Binding
	// Push is the static push-constant bytes, exactly Module.PushConstantSize long; Scalars
	// overwrite parts of it at run time.
	Push    []byte
	Scalars []ScalarSlot
	Grid    [3]uint32 // workgroup counts, for the largest case (see the package comment)
	// Scale, when not nil, shrinks the grid with the function's run-time length.
	Scale *GridScale
	// BarrierBefore makes this dispatch wait for every earlier one (see the package comment).
	BarrierBefore bool

	// Ops lists the graph operations this dispatch implements (e.g. "add", "rmsnorm"), and Label
	// names the graph node(s), for `vkc inspect` and `vkc dot`. The runtime ignores them.
	Ops   []string
	Label string
	// Estimated is the cost model's time for this dispatch and Measured the tuner's median, 0 if
	// unknown.
	Estimated time.Duration
	Measured  time.Duration
	// Work is what the dispatch computes, for vkc bench's throughput and roofline figures; the
	// runtime ignores it. The zero Work is unknown (a plan that records none).
	Work Work
}

// Work is the arithmetic and the memory traffic of one dispatch, as the compiler counts them
// from the kernel's problem: FLOPs are floating-point operations (a multiply-add counts 2; an
// exp, a division or a comparison 1), Bytes the bytes the dispatch must read and write in device
// memory, each tensor element once (caches may serve repeated reads; a kernel that rereads
// memory moves more). A launch of several dispatches (a split reduction's passes) shares its
// work among them by the bytes each binds.
//
// What a run computes can follow two run-time quantities: the function's run-time length n
// (Function.Length: a prompt of n tokens), and a count c read from scalar inputs, such as the keys
// an attention sees (kv_len = pos + seq, the valid rows of a KV cache):
//
//	c = clamp(Σ Inputs[Count.Inputs] (+ n with Count.PlusLength) + Count.Add, Count.Min, Count.Max)
//	FLOPs(n, c) = FLOPs + Σ_t t.FLOPs · n^t.Length · c^[t.Count],  likewise Bytes
//
// FLOPs and Bytes alone are the fixed part (which may be negative: causal attention over c keys
// sees c·seq − seq·(seq−1)/2 query-key pairs).
type Work struct {
	FLOPs, Bytes float64
	Terms        []WorkTerm
	Count        *WorkCount
}

// WorkTerm is a part of a Work that follows n, c or both.
type WorkTerm struct {
	Length       uint8 // the power of the run-time length n: 0, 1 or 2
	Count        bool  // multiplied by the count c
	FLOPs, Bytes float64
}

// WorkCount is the run-time count c of a Work.
type WorkCount struct {
	Inputs     []uint32 // indices of i32 or u32 scalar inputs of the function, summed
	PlusLength bool     // the function's run-time length n is added too
	Add        int64
	Min, Max   int64
}

// Known reports whether the plan recorded this work.
func (w *Work) Known() bool { return w.FLOPs != 0 || w.Bytes != 0 || len(w.Terms) > 0 }

// At is the work of one run at run-time length n (ignored by terms without a Length power)
// whose scalar inputs have the values scalar(i) (called only for the count's inputs), and the
// count c it used (0 without a count).
func (w *Work) At(n int64, scalar func(input uint32) int64) (flops, bytes float64, c int64) {
	if k := w.Count; k != nil {
		c = k.Add
		for _, i := range k.Inputs {
			c += scalar(i)
		}
		if k.PlusLength {
			c += n
		}
		c = min(max(c, k.Min), k.Max)
	}
	flops, bytes = w.at(float64(n), float64(c))
	return flops, bytes, c
}

func (w *Work) at(n, c float64) (flops, bytes float64) {
	flops, bytes = w.FLOPs, w.Bytes
	for _, t := range w.Terms {
		x := 1.0
		for range t.Length {
			x *= n
		}
		if t.Count {
			x *= c
		}
		flops += t.FLOPs * x
		bytes += t.Bytes * x
	}
	return flops, bytes
}

// MaxWork is the function's work at its largest run-time length and counts, and whether any
// dispatch recorded its work.
func (f *Function) MaxWork() (flops, bytes float64, known bool) {
	n := 0.0
	if f.Length != nil {
		n = float64(f.Length.Max)
	}
	for i := range f.Dispatches {
		w := &f.Dispatches[i].Work
		known = known || w.Known()
		c := 0.0
		if w.Count != nil {
			c = float64(w.Count.Max)
		}
		fl, b := w.at(n, c)
		flops += fl
		bytes += b
	}
	return flops, bytes, known
}

// Record is what the compiler decided, for people and tools; it does not affect execution.
type Record struct {
	Rules      []RuleCount // rewrite rules that fired, with how often
	Candidates []Candidate // alternatives considered, the chosen ones marked
	Notes      []string    // free-form remarks (negative results, limits hit)
	// ChosenBy says which path chose the graph and kernels: ChosenStatic (roofline estimates
	// and default configurations) or ChosenMeasured (tuned and selected on the device); ""
	// when unknown.
	ChosenBy string
}

// The paths Record.ChosenBy names.
const (
	ChosenStatic   = "static"
	ChosenMeasured = "measured"
)

// RuleCount says how often a rewrite rule was applied.
type RuleCount struct {
	Name  string
	Count uint64
}

// Candidate is one alternative the compiler considered: a kernel configuration for a graph node,
// or a whole-program candidate.
type Candidate struct {
	Subject   string // what was being decided, e.g. "decode/layer0.attn" or "program"
	Kernel    string // kernel key, if a kernel
	Config    map[string]int64
	Estimated time.Duration // 0 if unknown
	Measured  time.Duration // 0 if not measured
	Chosen    bool
	Note      string // e.g. "rejected: output mismatch 3e-2"
}

// Function returns the function named name, or nil.
func (p *Plan) Function(name string) *Function {
	for i := range p.Functions {
		if p.Functions[i].Name == name {
			return &p.Functions[i]
		}
	}
	return nil
}

// Bytes returns the tensor's size in bytes (see DType.Bytes).
func (v *Value) Bytes() (uint64, error) {
	n, err := v.DType.Bytes(v.Shape)
	return uint64(n), err
}

// RangeTerm names the checked quantity of r in f: "tokens", "pos + n".
func (f *Function) RangeTerm(r Range) string {
	name := func(i uint32) string {
		if uint64(i) < uint64(len(f.Inputs)) {
			return f.Inputs[i].Name
		}
		return "input" + strconv.FormatUint(uint64(i), 10)
	}
	s := name(r.Input)
	for _, p := range r.Plus {
		s += " + " + name(p)
	}
	if r.PlusLength {
		if f.Length != nil {
			s += " + " + f.Length.Name
		} else {
			s += " + length"
		}
	}
	return s
}

// DescribeRange says r in words, as vkc inspect prints it: "0 ≤ tokens ≤ 255 (embedding ...)".
func (f *Function) DescribeRange(r Range) string {
	s := f.RangeTerm(r)
	if r.Min != NoMin {
		s = strconv.FormatInt(r.Min, 10) + " ≤ " + s
	}
	if r.Max != NoMax {
		s += " ≤ " + strconv.FormatInt(r.Max, 10)
	}
	var why []string
	for _, w := range []string{r.MinWhy, r.MaxWhy} {
		if w != "" && (len(why) == 0 || why[0] != w) {
			why = append(why, w)
		}
	}
	if len(why) > 0 {
		s += " (" + strings.Join(why, "; ") + ")"
	}
	return s
}
