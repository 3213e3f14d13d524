package codegen

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
)

// Value is the result of an expression: an SSA value with a static type. Values are created by Builder
// methods and are only meaningful to the Builder that made them. A Value defined inside a branch or a
// loop body can be used only inside it (SPIR-V dominance); carry results out through a Var.
//
// The zero Value is invalid. A builder method that finds a type error records it and returns an
// invalid Value of the type it would have produced, so one mistake gives one error, not a cascade.
type Value struct {
	b  *Builder
	id int32
	t  Type
}

// Type is v's type.
func (v Value) Type() Type { return v.t }

// Valid reports whether v came from a successful builder call.
func (v Value) Valid() bool { return v.b != nil && v.id > 0 }

// kind is what a node does. Every switch over kinds is exhaustive: a new kind that an emitter, the
// dump or the checker does not handle panics in tests rather than slipping through.
type kind uint8

const (
	kInvalid kind = iota
	// module-level values
	kConst  // a constant: bits in lit
	kSpec   // a specialization constant: default bits in lit, spec index in mem
	kSpecOp // OpSpecConstantOp over module-level operands
	// values loaded once at function entry
	kPush    // push-constant member mem
	kBuiltin // built-in input lit
	// expressions
	kInst       // a plain instruction: op with operands
	kExt        // GLSL.std.450 instruction lit with operands
	kLoad       // element ops[0] of memory object mem
	kArrayLen   // runtime length of buffer mem
	kVarGet     // load of Var mem
	kMatLoad    // cooperative matrix at element ops[0] of memory object mem, stride ops[1], layout lit
	kVarElemGet // component ops[0] of the matrix in Var mem
	// workgroup matrix from the tensor (base, rows, cols, stride) = ops[0..3] of buffer mem, sliced
	// at (ops[4], ops[5]); lit: tensorTranspose, tensorClamp
	kMatLoadTensor
	// statements
	kStore    // memory object mem [ops[0]] = ops[1]
	kAtomic   // atomic op on element ops[0] of memory object mem with ops[1]: a value with a side effect
	kVarSet   // Var mem = ops[0]
	kIf       // if ops[0] { blocks[0] } else { blocks[1] }
	kLoop     // loop: blocks[0] condition (may be empty: forever), blocks[1] body, blocks[2] continue
	kBreak    // leave the innermost loop
	kContinue // go to the innermost loop's continue block
	kReturn   // leave the kernel
	kBarrier  // OpControlBarrier (lit: exec scope, mem scope, semantics packed in ops as constants)
	kMemBarrier
	kMatStore   // matrix ops[1] to element ops[0] of memory object mem, stride ops[2], layout lit
	kVarElemSet // component ops[0] of the matrix in Var mem = ops[1]
	// workgroup matrix ops[6] to a tensor slice, operands as kMatLoadTensor
	kMatStoreTensor
)

// operand is a Value id or a literal word.
type operand struct {
	id    int32
	lit   uint32
	isLit bool
}

type node struct {
	kind      kind
	t         Type // result type; invalid for statements
	op        opcode
	ops       []operand
	lit       uint32
	mem       int32
	blocks    []*block
	blk       *block // where the node is defined; nil for module-level and entry values
	divergent bool   // may differ between invocations of a workgroup
	lane      bool   // may differ between invocations of a subgroup (implies divergent)
	aux       Type   // the matrix type of a MatrixLength
	where     site   // caller position, for errors
}

// site is a caller position recorded cheaply, as program counters, and resolved to "file.go:line"
// only when an error names it: resolving every node's position eagerly was most of the time a
// template's Build took (a tuner builds hundreds of configurations).
type site struct {
	pcs [6]uintptr
	n   uint8
}

// String is the position of the first caller outside the builder's internals, "?" when none.
func (s site) String() string { return firstOutside(s.pcs[:s.n]) }

// block is a straight-line list of nodes inside a structured construct.
type block struct {
	parent *block
	owner  int32 // the node of the If or loop this block belongs to; 0 for the function body
	role   int   // for loops: 0 condition, 1 body, 2 continue; for ifs: 0 then, 1 else
	nodes  []int32
	closed bool // ends in break, continue or return
}

// memKind is the storage of a memory object.
type memKind uint8

const (
	memBuffer memKind = iota + 1
	memShared
	memLocal
)

// Buffer is a storage buffer binding: a runtime array of Elem at descriptor set 0, binding Binding.
type Buffer struct {
	b       *Builder
	idx     int32
	Name    string
	Binding int
	Elem    Type
	Access  Access
	Options BufferOption
}

// BufferOption modifies a buffer declaration.
type BufferOption uint8

const (
	// Aliased declares that the buffer may share memory with another binding of the same kernel (the
	// Aliased decoration). SPIR-V lets a compiler assume that memory object declarations without it
	// do not overlap, so a binding that may view the same memory as another one written by the same
	// dispatch must be declared Aliased (ANGLE decorates every non-restrict SSBO for this reason).
	Aliased BufferOption = 1 << iota
	// Restrict promises that no other binding overlaps this one (the Restrict decoration).
	Restrict
	// Coherent makes writes visible to other workgroups without a barrier (the Coherent decoration).
	Coherent
)

// Array is a workgroup-shared or function-local array.
type Array struct {
	b    *Builder
	idx  int32
	Name string
	Elem Type
	Len  Value // a constant or specialization constant
}

// Var is a function-local variable of a scalar, vector or cooperative matrix type.
type Var struct {
	b         *Builder
	idx       int32
	Name      string
	T         Type
	divergent bool
	lane      bool
}

// Memory is a Buffer or an Array: something Load and Store index.
type Memory interface{ memory() (*Builder, int32) }

func (m *Buffer) memory() (*Builder, int32) { return m.b, m.idx }
func (m *Array) memory() (*Builder, int32)  { return m.b, m.idx }

type memObj struct {
	kind   memKind
	name   string
	elem   Type
	access Access
	length Value
	buf    *Buffer
}

// PushConstant is a member of the kernel's push-constant block.
type PushConstant struct {
	Name   string
	Type   Type
	Offset int
}

// SpecConstant is a specialization constant: its SpecId, name, type and default.
type SpecConstant struct {
	ID      int
	Name    string
	Type    Type
	Default uint32 // the bits of the default value (0 or 1 for a bool)
}

// Dim is one dimension of the workgroup size: a fixed Size, or a specialization constant (SpecID >= 0)
// whose default is Size.
type Dim struct {
	Size   uint32
	SpecID int
}

// Builder builds one kernel. Create it with NewBuilder, declare the interface (buffers, push
// constants, specialization constants, shared arrays, workgroup size), build the body with the
// expression and statement methods, and call Finish. A Builder is not safe for concurrent use.
//
// Statement methods append to the current block: the function body, or the body of the If, For or
// Loop whose callback is running.
type Builder struct {
	name     string
	nodes    []node
	cur      *block
	body     *block
	mems     []memObj
	vars     []*Var
	buffers  []*Buffer
	push     []PushConstant
	pushIDs  []int32
	specs    []SpecConstant
	wg       [3]Value
	wgSet    bool
	builtins map[uint32]int32
	errs     []Problem
	finished bool
	loops    int

	nativeF16Math bool
	vmm           bool
	emulate       bool
	dontUnroll    bool
	varNames      map[string]int
}

// DontUnrollLoops marks every loop the builder emits (For, While, Loop) DontUnroll, SPIR-V's hint
// that the driver keep it a loop. For CPU implementations: Mesa's NIR unrolls a loop whose trip
// count is constant once the specialization constants are (a key tile of block_k = 32 keys is),
// and lavapipe's LLVM then compiles the straight-line code for seconds per kernel: attention_flash
// at its static point took 2.9 s to compile, 0.48 s with its loops kept (Mesa 22.3). A GPU's
// compiler decides well when to unroll; kernels leave it alone there (kernels.newBuilder).
func (b *Builder) DontUnrollLoops(on bool) { b.dontUnroll = on }

// UseVulkanMemoryModel emits the module under the Vulkan memory model (OpMemoryModel Logical
// Vulkan, capability VulkanMemoryModel; FeatureVulkanMemoryModel in Kernel.Needs) even without a
// cooperative matrix, which always implies it. What changes: loads and stores of shared arrays are
// non-private; those of Coherent buffers are non-private and made visible or available at the
// queue-family scope instead of relying on the Coherent decoration, which the model bans; barriers
// that name memory also make it available and visible; device memory scopes (of barriers and
// atomics) become the queue-family scope (see emitter.memOperands and barrierOperands). Programs
// mean the same under both models; the option exists so that tests can run any kernel under the
// model cooperative-matrix kernels need.
func (b *Builder) UseVulkanMemoryModel(on bool) { b.vmm = on }

// usesMatrices reports whether any value or variable is a cooperative matrix.
func (b *Builder) usesMatrices() bool {
	for i := range b.nodes {
		if b.nodes[i].t.IsMatrix() || b.nodes[i].aux.IsMatrix() {
			return true
		}
	}
	for _, v := range b.vars {
		if v.T.IsMatrix() {
			return true
		}
	}
	return false
}

// NewBuilder starts a kernel named name (the name appears in errors and in the dump; the SPIR-V entry
// point is always "main"). The workgroup size defaults to 1x1x1.
func NewBuilder(name string) *Builder {
	b := &Builder{name: name, builtins: map[uint32]int32{}}
	b.nodes = append(b.nodes, node{}) // id 0 is the invalid Value
	b.body = &block{}
	b.cur = b.body
	return b
}

// Problem is one error found while building a kernel.
type Problem struct {
	Pos       string // file:line of the builder call, outside package codegen
	Construct string // the builder method, e.g. "Add" or "Store"
	Msg       string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s: %s", p.Pos, p.Construct, p.Msg)
}

// BuildError is what Finish returns when the kernel has errors: the kernel's name and every problem
// found, in the order the calls were made.
type BuildError struct {
	Kernel   string
	Problems []Problem
}

func (e *BuildError) Error() string {
	var s strings.Builder
	fmt.Fprintf(&s, "codegen: kernel %q:", e.Kernel)
	if len(e.Problems) == 1 {
		s.WriteString(" " + e.Problems[0].String())
		return s.String()
	}
	for _, p := range e.Problems {
		s.WriteString("\n\t" + p.String())
	}
	return s.String()
}

// pkgPrefix is this package's prefix of function names, "github.com/vkc-project/vkc/codegen.".
var pkgPrefix = func() string {
	pc, _, _, _ := runtime.Caller(0)
	name := runtime.FuncForPC(pc).Name() // vkc/codegen.init.func1 (or glob..func1)
	slash := strings.LastIndex(name, "/")
	return name[:slash+strings.Index(name[slash:], ".")+1]
}()

// caller is the position of the first frame outside the Builder's own methods.
func caller() string {
	pcs := make([]uintptr, 16)
	n := runtime.Callers(3, pcs)
	return firstOutside(pcs[:n])
}

// callSite records the caller of the function that calls it (see caller) without resolving it.
func callSite() site {
	var s site
	s.n = uint8(runtime.Callers(3, s.pcs[:]))
	return s
}

func firstOutside(pcs []uintptr) string {
	if len(pcs) == 0 {
		return "?"
	}
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		fn := strings.TrimPrefix(f.Function, pkgPrefix)
		internal := fn != f.Function && (strings.HasPrefix(fn, "(*") || (len(fn) > 0 && fn[0] >= 'a' && fn[0] <= 'z'))
		if !internal {
			return fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
		}
		if !more {
			return "?"
		}
	}
}

func (b *Builder) errorf(construct, format string, args ...any) {
	b.errs = append(b.errs, Problem{Pos: caller(), Construct: construct, Msg: fmt.Sprintf(format, args...)})
}

// Err returns the problems found so far, as Finish would, or nil.
func (b *Builder) Err() error {
	if len(b.errs) == 0 {
		return nil
	}
	return &BuildError{Kernel: b.name, Problems: append([]Problem(nil), b.errs...)}
}

// Name is the kernel's name.
func (b *Builder) Name() string { return b.name }

// ok checks that every value is valid and belongs in the current scope. It reports an invalid value
// only when no error has been recorded yet: an invalid value is the product of an earlier error.
func (b *Builder) ok(construct string, vs ...Value) bool {
	if b.finished {
		b.errorf(construct, "builder used after Finish")
		return false
	}
	for _, v := range vs {
		if v.b != nil && v.b != b {
			b.errorf(construct, "Value from another builder (kernel %q)", v.b.name)
			return false
		}
		if v.b == nil || v.id <= 0 {
			if len(b.errs) == 0 {
				b.errorf(construct, "invalid Value (the zero Value)")
			}
			return false
		}
		n := &b.nodes[v.id]
		if n.blk != nil && !b.encloses(n.blk) {
			b.errorf(construct, "value %%%d (%s, defined inside the branch or loop at %s) is used outside the branch or loop that defines it; carry it out through a Var", v.id, v.t, b.nodes[n.blk.owner].where.String())
			return false
		}
	}
	return true
}

// encloses reports whether blk is the current block or one of its ancestors.
func (b *Builder) encloses(blk *block) bool {
	for c := b.cur; c != nil; c = c.parent {
		if c == blk {
			return true
		}
	}
	return false
}

// add appends a node to the current block (or to no block, for module-level and entry values) and
// returns its Value.
func (b *Builder) add(n node, inBlock bool) Value {
	// Positions are recorded only for the nodes errors name: control flow and barriers (see
	// site); a value used outside its branch is named by its enclosing construct's position.
	if n.where.n == 0 && (n.kind == kIf || n.kind == kLoop || n.kind == kBarrier) {
		n.where = callSite()
	}
	id := int32(len(b.nodes))
	if inBlock {
		if b.cur.closed {
			b.errorf(kindName(n.kind), "statement after break, continue or return in the same block is unreachable")
		}
		n.blk = b.cur
		b.cur.nodes = append(b.cur.nodes, id)
	}
	b.nodes = append(b.nodes, n)
	return Value{b: b, id: id, t: n.t}
}

// global reports whether v is a module-level value (a constant, specialization constant or
// constant expression): usable anywhere, including as an array length.
func (b *Builder) global(v Value) bool {
	if v.id <= 0 {
		return false
	}
	k := b.nodes[v.id].kind
	return k == kConst || k == kSpec || k == kSpecOp
}

func (b *Builder) divergent(vs ...Value) bool {
	for _, v := range vs {
		if v.id > 0 && b.nodes[v.id].divergent {
			return true
		}
	}
	return false
}

// lane reports whether any of vs may differ between the invocations of a subgroup.
func (b *Builder) lane(vs ...Value) bool {
	for _, v := range vs {
		if v.id > 0 && b.nodes[v.id].lane {
			return true
		}
	}
	return false
}

func ids(vs ...Value) []operand {
	ops := make([]operand, len(vs))
	for i, v := range vs {
		ops[i] = operand{id: v.id}
	}
	return ops
}

// ---- declarations ----

// Buffer declares a storage buffer of elements elem (a numeric scalar, or a vec2/vec4: vec3 has a
// 16-byte stride in std430, so declare vec4 or scalars instead) at the next binding of set 0.
// The runtime may bind any byte range whose offset is a multiple of the device's
// minStorageBufferOffsetAlignment; several bindings may view the same memory (declare them Aliased).
func (b *Builder) Buffer(name string, elem Type, access Access, opts ...BufferOption) *Buffer {
	var o BufferOption
	for _, x := range opts {
		o |= x
	}
	buf := &Buffer{b: b, idx: int32(len(b.mems)), Name: name, Binding: len(b.buffers), Elem: elem, Access: access, Options: o}
	switch {
	case !elem.Valid() || elem.IsBool() || elem.IsMatrix():
		b.errorf("Buffer", "buffer %q: element type %s cannot be stored in a buffer", name, elem)
	case elem.Len() == 3:
		b.errorf("Buffer", "buffer %q: vec3 elements have a 16-byte stride in std430; use vec4 or scalars", name)
	case access < ReadOnly || access > ReadWrite:
		b.errorf("Buffer", "buffer %q: invalid access %d", name, access)
	case o&Aliased != 0 && o&Restrict != 0:
		b.errorf("Buffer", "buffer %q: both Aliased and Restrict", name)
	}
	b.mems = append(b.mems, memObj{kind: memBuffer, name: name, elem: elem, access: access, buf: buf})
	b.buffers = append(b.buffers, buf)
	return buf
}

// Push declares a member of the push-constant block (offsets follow std430 in declaration order) and
// returns its value, which is loaded once at entry and usable anywhere.
func (b *Builder) Push(name string, t Type) Value {
	if !t.Valid() || t.IsBool() || t.IsMatrix() || t.kind == BF16Kind {
		b.errorf("Push", "push constant %q: type %s cannot be in a push-constant block", name, t)
		return Value{t: t}
	}
	off := 0
	if n := len(b.push); n > 0 {
		off = b.push[n-1].Offset + b.push[n-1].Type.Size()
	}
	al := t.Align()
	off = (off + al - 1) / al * al
	b.push = append(b.push, PushConstant{Name: name, Type: t, Offset: off})
	v := b.add(node{kind: kPush, t: t, mem: int32(len(b.push) - 1)}, false)
	b.pushIDs = append(b.pushIDs, v.id)
	return v
}

// Spec declares a specialization constant of type t (bool, i32 or u32) with SpecId equal to its
// position among the kernel's specialization constants, and returns it as a value usable anywhere:
// in expressions, as an array length, and as a workgroup size.
func (b *Builder) Spec(name string, t Type, def int64) Value {
	if t != Bool && t != I32 && t != U32 {
		b.errorf("Spec", "specialization constant %q: type %s (want bool, i32 or u32)", name, t)
		return Value{t: t}
	}
	bits := uint32(def)
	if t == Bool && def != 0 {
		bits = 1
	}
	b.specs = append(b.specs, SpecConstant{ID: len(b.specs), Name: name, Type: t, Default: bits})
	return b.add(node{kind: kSpec, t: t, lit: bits, mem: int32(len(b.specs) - 1)}, false)
}

// WorkgroupSize sets the workgroup size. Each dimension is a u32 constant or specialization constant.
//
// Choice: a specialization-constant size is emitted as the WorkgroupSize built-in on an
// OpSpecConstantComposite (valid from SPIR-V 1.0 and in every Vulkan version), plus a LocalSize
// execution mode with the defaults, not as LocalSizeId, which Vulkan allows only with maintenance4.
func (b *Builder) WorkgroupSize(x, y, z Value) {
	if !b.ok("WorkgroupSize", x, y, z) {
		return
	}
	for _, v := range []Value{x, y, z} {
		if v.t != U32 || (b.nodes[v.id].kind != kConst && b.nodes[v.id].kind != kSpec) {
			b.errorf("WorkgroupSize", "each dimension must be a u32 constant or specialization constant, got %s %s", v.t, kindName(b.nodes[v.id].kind))
			return
		}
	}
	if b.wgSet {
		b.errorf("WorkgroupSize", "workgroup size set twice")
	}
	b.wg = [3]Value{x, y, z}
	b.wgSet = true
}

// WorkgroupSizeValue returns dimension dim (0, 1 or 2) of the workgroup size, a u32 constant or
// specialization constant (1 if the size is not set yet).
func (b *Builder) WorkgroupSizeValue(dim int) Value {
	if !b.wgSet {
		return b.U32(1)
	}
	return b.wg[dim]
}

// Shared declares a workgroup-shared array of length elements; length is a constant or
// specialization constant (or a constant expression of them) of an integer type.
func (b *Builder) Shared(name string, elem Type, length Value) *Array {
	return b.array("Shared", memShared, name, elem, length)
}

// LocalArray declares a function-local array; length as for Shared.
func (b *Builder) LocalArray(name string, elem Type, length Value) *Array {
	return b.array("LocalArray", memLocal, name, elem, length)
}

func (b *Builder) array(construct string, k memKind, name string, elem Type, length Value) *Array {
	a := &Array{b: b, idx: int32(len(b.mems)), Name: name, Elem: elem, Len: length}
	b.mems = append(b.mems, memObj{kind: k, name: name, elem: elem, length: length, access: ReadWrite})
	if !elem.Valid() || elem.IsMatrix() {
		b.errorf(construct, "array %q: invalid element type %s", name, elem)
	} else if b.ok(construct, length) {
		if !b.global(length) || !length.t.IsInt() || length.t.IsVector() {
			b.errorf(construct, "array %q: length must be an integer constant or specialization constant, got %s %s", name, length.t, kindName(b.nodes[length.id].kind))
		} else if n := b.nodes[length.id]; n.kind == kConst && int32(n.lit) <= 0 {
			b.errorf(construct, "array %q: length %d", name, int32(n.lit))
		}
	}
	return a
}

// uniqueVarName keeps variable names distinct in the dump and the module's debug names: a repeated
// name gets a numeric suffix (i, i_1, i_2, ...).
func (b *Builder) uniqueVarName(name string) string {
	if b.varNames == nil {
		b.varNames = map[string]int{}
	}
	n := b.varNames[name]
	b.varNames[name] = n + 1
	if n == 0 {
		return name
	}
	return fmt.Sprintf("%s_%d", name, n)
}

// Var declares a function-local variable initialised to init at this point of the program. A name
// already used by another variable gets a numeric suffix (Var.Name has the final name).
func (b *Builder) Var(name string, init Value) *Var {
	v := &Var{b: b, idx: int32(len(b.vars)), Name: b.uniqueVarName(name), T: init.t}
	b.vars = append(b.vars, v)
	b.Set(v, init)
	return v
}

// VarOf declares an uninitialised function-local variable of type t (its value is undefined until Set).
func (b *Builder) VarOf(name string, t Type) *Var {
	v := &Var{b: b, idx: int32(len(b.vars)), Name: b.uniqueVarName(name), T: t}
	if !t.Valid() {
		b.errorf("VarOf", "variable %q: invalid type", name)
	}
	b.vars = append(b.vars, v)
	return v
}

// Get loads the variable's current value.
func (b *Builder) Get(v *Var) Value {
	if v == nil || v.b != b {
		b.errorf("Get", "variable from another builder")
		return Value{}
	}
	if !b.ok("Get") {
		return Value{t: v.T}
	}
	return b.add(node{kind: kVarGet, t: v.T, mem: v.idx, divergent: v.divergent, lane: v.lane}, true)
}

// Set stores x into the variable.
func (b *Builder) Set(v *Var, x Value) {
	if v == nil || v.b != b {
		b.errorf("Set", "variable from another builder")
		return
	}
	if !b.ok("Set", x) {
		return
	}
	if x.t != v.T {
		b.errorf("Set", "variable %q has type %s, value has type %s", v.Name, v.T, x.t)
		return
	}
	if b.divergent(x) || b.divergentContext() {
		v.divergent = true
	}
	if b.lane(x) || b.laneContext() {
		v.lane = true
	}
	b.add(node{kind: kVarSet, ops: ids(x), mem: v.idx}, true)
}

// divergentContext reports whether the current block is under a condition the IR knows may differ
// between invocations of a workgroup.
func (b *Builder) divergentContext() bool {
	for c := b.cur; c != nil; c = c.parent {
		if c.owner != 0 && b.nodes[c.owner].divergent {
			return true
		}
	}
	return false
}

// laneContext reports whether the current block is under a condition the IR knows may differ
// between invocations of a subgroup.
func (b *Builder) laneContext() bool {
	for c := b.cur; c != nil; c = c.parent {
		if c.owner != 0 && b.nodes[c.owner].lane {
			return true
		}
	}
	return false
}

func (b *Builder) mem(construct string, m Memory) (int32, bool) {
	if m == nil {
		b.errorf(construct, "nil memory object")
		return 0, false
	}
	mb, idx := m.memory()
	if mb != b {
		b.errorf(construct, "memory object from another builder")
		return 0, false
	}
	return idx, true
}

// Load reads element i (an i32 or u32 scalar) of a buffer or array.
func (b *Builder) Load(m Memory, i Value) Value {
	idx, ok := b.mem("Load", m)
	if !ok {
		return Value{}
	}
	mo := &b.mems[idx]
	if !b.ok("Load", i) || !b.index("Load", i) {
		return Value{t: mo.elem}
	}
	if mo.access == WriteOnly {
		b.errorf("Load", "load from write-only buffer %q", mo.name)
		return Value{t: mo.elem}
	}
	return b.add(node{kind: kLoad, t: mo.elem, ops: ids(i), mem: idx, divergent: b.divergent(i), lane: b.lane(i)}, true)
}

// Store writes x to element i of a buffer or array.
func (b *Builder) Store(m Memory, i, x Value) {
	idx, ok := b.mem("Store", m)
	if !ok {
		return
	}
	mo := &b.mems[idx]
	if !b.ok("Store", i, x) || !b.index("Store", i) {
		return
	}
	if mo.access == ReadOnly {
		b.errorf("Store", "store to read-only buffer %q", mo.name)
		return
	}
	if x.t != mo.elem {
		b.errorf("Store", "%q holds %s, value is %s", mo.name, mo.elem, x.t)
		return
	}
	b.add(node{kind: kStore, ops: ids(i, x), mem: idx}, true)
}

// Len returns the number of elements of a buffer's bound range, as a u32 (OpArrayLength).
func (b *Builder) Len(buf *Buffer) Value {
	if buf == nil || buf.b != b {
		b.errorf("Len", "buffer from another builder")
		return Value{t: U32}
	}
	if !b.ok("Len") {
		return Value{t: U32}
	}
	return b.add(node{kind: kArrayLen, t: U32, mem: buf.idx}, true)
}

func (b *Builder) index(construct string, i Value) bool {
	if !i.t.IsInt() || i.t.IsVector() {
		b.errorf(construct, "index must be an i32 or u32 scalar, got %s", i.t)
		return false
	}
	return true
}

// ---- built-ins ----

func (b *Builder) builtin(bi uint32, t Type, divergent, lane bool) Value {
	if !b.ok("builtin") {
		return Value{t: t}
	}
	if id, ok := b.builtins[bi]; ok {
		return Value{b: b, id: id, t: t}
	}
	v := b.add(node{kind: kBuiltin, t: t, lit: bi, divergent: divergent, lane: lane}, false)
	b.builtins[bi] = v.id
	return v
}

// GlobalID is gl_GlobalInvocationID, a vec3<u32>.
func (b *Builder) GlobalID() Value {
	return b.builtin(builtInGlobalInvocationId, Vec(U32, 3), true, true)
}

// LocalID is gl_LocalInvocationID, a vec3<u32>.
func (b *Builder) LocalID() Value {
	return b.builtin(builtInLocalInvocationId, Vec(U32, 3), true, true)
}

// LocalIndex is gl_LocalInvocationIndex, a u32.
func (b *Builder) LocalIndex() Value { return b.builtin(builtInLocalInvocationIndex, U32, true, true) }

// WorkgroupID is gl_WorkGroupID, a vec3<u32>.
func (b *Builder) WorkgroupID() Value {
	return b.builtin(builtInWorkgroupId, Vec(U32, 3), false, false)
}

// NumWorkgroups is gl_NumWorkGroups, a vec3<u32>.
func (b *Builder) NumWorkgroups() Value {
	return b.builtin(builtInNumWorkgroups, Vec(U32, 3), false, false)
}

// SubgroupSize is gl_SubgroupSize, a u32 (needs FeatureSubgroupBasic).
func (b *Builder) SubgroupSize() Value { return b.builtin(builtInSubgroupSize, U32, false, false) }

// SubgroupInvocation is gl_SubgroupInvocationID, a u32 (needs FeatureSubgroupBasic).
func (b *Builder) SubgroupInvocation() Value {
	return b.builtin(builtInSubgroupLocalInvocationId, U32, true, true)
}

// SubgroupID is gl_SubgroupID, the index of the invocation's subgroup in the workgroup, a u32
// (needs FeatureSubgroupBasic). It differs between subgroups but not within one, so cooperative
// matrix operations may depend on it.
func (b *Builder) SubgroupID() Value { return b.builtin(builtInSubgroupId, U32, true, false) }

// NumSubgroups is gl_NumSubgroups, the number of subgroups in the workgroup, a u32 (needs
// FeatureSubgroupBasic).
func (b *Builder) NumSubgroups() Value { return b.builtin(builtInNumSubgroups, U32, false, false) }
