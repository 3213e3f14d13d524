package codegen

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
)

// spirvVersion is the module version: SPIR-V 1.3, what Vulkan 1.1 consumes. Everything the IR
// expresses (StorageBuffer storage class, 16-bit storage, GroupNonUniform*) is core in 1.3, so no
// extension is declared today; a feature whose capability is newer than the module version (see
// capabilityInfo) brings its extension, and one that needs a newer version must raise it here.
const spirvVersion = 0x00010300

// Kernel is a finished kernel: its SPIR-V module and what the runtime and plan need to run it.
type Kernel struct {
	Name string
	// Words is the SPIR-V module; Bytes gives it in the little-endian byte form Vulkan loads.
	Words []uint32
	// Bindings are the storage buffers, set 0, in binding order.
	Bindings []Binding
	// Push is the push-constant block's layout and PushSize its size in bytes (0: no block).
	Push     []PushConstant
	PushSize int
	// Specs are the specialization constants, indexed by SpecId.
	Specs []SpecConstant
	// Workgroup is the workgroup size; a dimension may be a specialization constant.
	Workgroup [3]Dim
	// Shared lists the workgroup-shared arrays (see SharedBytes).
	Shared []SharedArray
	// Needs lists the device features the module declares capabilities for.
	Needs Feature
	// Capabilities and Extensions are what the module declares, by SPIR-V name.
	Capabilities []string
	Extensions   []string

	// dump is made on first use from the builder (most kernels a tuner builds are never shown).
	dumpOnce sync.Once
	dumpText string
	builder  *Builder
	nodes    []node // the IR, for evaluating constant expressions
}

// Binding is one storage buffer of a kernel.
type Binding struct {
	Set, Binding int
	Name         string
	Access       Access
	Elem         Type
	Options      BufferOption
}

// Bytes returns the module as little-endian bytes.
func (k *Kernel) Bytes() []byte {
	out := make([]byte, 4*len(k.Words))
	for i, w := range k.Words {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}

// Dump returns the kernel as readable text (see Builder.Dump).
func (k *Kernel) Dump() string {
	k.dumpOnce.Do(func() {
		if k.builder != nil {
			k.dumpText = k.builder.dump()
		}
	})
	return k.dumpText
}

// Finish checks the kernel, emits it and returns it, or returns a *BuildError listing every problem.
// The Builder cannot be used afterwards.
func (b *Builder) Finish() (*Kernel, error) {
	if b.finished {
		return nil, fmt.Errorf("codegen: kernel %q: Finish called twice", b.name)
	}
	b.checkBarriers()
	if b.emulate && b.usesMatrices() {
		b.SubgroupInvocation() // the emulation shares out accumulators by them
		b.SubgroupSize()
	}
	b.finished = true
	if err := b.Err(); err != nil {
		return nil, err
	}
	k := &Kernel{Name: b.name, Push: b.push, Specs: b.specs}
	for _, buf := range b.buffers {
		k.Bindings = append(k.Bindings, Binding{Set: 0, Binding: buf.Binding, Name: buf.Name, Access: buf.Access, Elem: buf.Elem, Options: buf.Options})
	}
	if n := len(b.push); n > 0 {
		k.PushSize = b.push[n-1].Offset + b.push[n-1].Type.Size()
		k.PushSize = (k.PushSize + 3) &^ 3
	}
	for i := range k.Workgroup {
		k.Workgroup[i] = Dim{Size: 1, SpecID: -1}
		if b.wgSet {
			n := b.nodes[b.wg[i].id]
			k.Workgroup[i].Size = n.lit
			if n.kind == kSpec {
				k.Workgroup[i].SpecID = int(n.mem)
			}
		}
	}
	for _, m := range b.mems {
		if m.kind == memShared {
			k.Shared = append(k.Shared, SharedArray{Name: m.name, Elem: m.elem, len: m.length.id})
		}
	}
	k.nodes = b.nodes
	e := newEmitter(b)
	k.Words = e.module()
	k.Needs = e.feats
	for _, c := range e.capList() {
		k.Capabilities = append(k.Capabilities, capabilityInfo[c].name)
	}
	k.Extensions = e.exts
	k.builder = b
	return k, nil
}

// checkBarriers rejects a control barrier that some invocations of a workgroup may not reach: one
// under a branch or loop condition, or after a break, continue or return, that the IR knows to
// depend on the invocation (its id, or a value loaded at an index derived from it). The same check
// at subgroup level rejects a subgroup-scope barrier, or a cooperative matrix operation, that some
// invocations of a subgroup may not reach.
func (b *Builder) checkBarriers() {
	b.checkUniform(false)
	b.checkUniform(true)
}

// uniformityLevel reads and writes the divergence flag of one level: the workgroup (divergent) or
// the subgroup (lane).
type uniformityLevel struct {
	get func(n *node) bool
	set func(n *node)
}

// checkUniform is checkBarriers at the workgroup level (sub false) or the subgroup level.
func (b *Builder) checkUniform(sub bool) {
	lv := uniformityLevel{get: func(n *node) bool { return n.divergent }, set: func(n *node) { n.divergent = true }}
	who := "workgroup"
	if sub {
		lv = uniformityLevel{get: func(n *node) bool { return n.lane }, set: func(n *node) { n.lane = true }}
		who = "subgroup"
	}
	// must reports whether every invocation of the level must reach n, and names it.
	must := func(n *node) (string, bool) {
		if n.kind == kBarrier {
			subgroup := b.nodes[n.ops[0].id].lit == scopeSubgroup
			return "control barrier", subgroup == sub
		}
		matrixOp := (n.t.IsMatrix() && (n.kind == kInst || n.kind == kMatLoad || n.kind == kMatLoadTensor)) || n.kind == kMatStore || n.kind == kMatStoreTensor
		if matrixOp && sub {
			return "cooperative matrix operation", true
		}
		mt := n.t
		if n.kind == kMatStore || n.kind == kMatStoreTensor {
			mt = n.aux
		}
		if matrixOp && mt.MatrixScope() == ScopeWorkgroup {
			return "workgroup-scope cooperative matrix operation", true
		}
		return "", false
	}
	// A loop is divergent when its condition is, or when a break, continue or return inside it is
	// under a divergent condition.
	var mark func(blk *block, div bool) bool
	mark = func(blk *block, div bool) bool {
		exits := false
		for _, id := range blk.nodes {
			n := &b.nodes[id]
			switch n.kind {
			case kIf:
				d := div || lv.get(n)
				for _, c := range n.blocks {
					exits = mark(c, d) || exits
				}
			case kLoop:
				d := div || lv.get(n)
				inner := false
				for _, c := range n.blocks {
					inner = mark(c, d) || inner
				}
				if inner {
					lv.set(n)
				}
				// A divergent return inside the loop also makes the code after the loop divergent.
				exits = exits || b.hasDivergentReturn(n, lv)
			case kBreak, kContinue, kReturn:
				exits = exits || div
			}
		}
		return exits
	}
	mark(b.body, false)

	reported := map[string]bool{} // one error per divergent region
	var walk func(blk *block, div bool, where string) bool
	walk = func(blk *block, div bool, why string) bool {
		for _, id := range blk.nodes {
			n := &b.nodes[id]
			if name, ok := must(n); ok && div && !reported[why] {
				reported[why] = true
				pos := n.where.String()
				if n.where.n == 0 && blk.owner != 0 {
					pos = b.nodes[blk.owner].where.String()
				}
				construct := "Barrier"
				if n.kind != kBarrier {
					construct = "Matrix"
				}
				b.errs = append(b.errs, Problem{Pos: pos, Construct: construct, Msg: name + " in divergent control flow (" + why + "): not every invocation of the " + who + " reaches it"})
			}
			switch n.kind {
			case kIf:
				d, w := div, why
				if lv.get(n) && !div {
					d, w = true, "under an if whose condition depends on the invocation, at "+n.where.String()
				}
				r1 := walk(n.blocks[0], d, w)
				r2 := walk(n.blocks[1], d, w)
				if (r1 || r2) && !div {
					div, why = true, "after a return under a condition that depends on the invocation"
				}
			case kLoop:
				d, w := div, why
				if lv.get(n) && !div {
					d, w = true, "in a loop whose trip count depends on the invocation, at "+n.where.String()
				}
				r := false
				for _, c := range n.blocks {
					r = walk(c, d, w) || r
				}
				if r && !div {
					div, why = true, "after a return under a condition that depends on the invocation"
				}
			case kReturn:
				if div {
					return true
				}
			}
		}
		return false
	}
	walk(b.body, false, "")
}

func (b *Builder) hasDivergentReturn(loop *node, lv uniformityLevel) bool {
	var find func(blk *block, div bool) bool
	find = func(blk *block, div bool) bool {
		for _, id := range blk.nodes {
			n := &b.nodes[id]
			switch n.kind {
			case kReturn:
				if div {
					return true
				}
			case kIf, kLoop:
				for _, c := range n.blocks {
					if find(c, div || lv.get(n)) {
						return true
					}
				}
			}
		}
		return false
	}
	for _, c := range loop.blocks {
		if find(c, lv.get(loop)) {
			return true
		}
	}
	return false
}

// ---- emitter ----

type emitter struct {
	b     *Builder
	next  uint32
	feats Feature
	exts  []string
	// f16conv: an f16 value is converted to or from (storage-only use); see the end of module.
	f16conv bool

	annots, globals, fn, names []uint32

	types    map[string]uint32
	consts   map[[2]uint32]uint32 // (type id, bits)
	vals     []uint32             // SPIR-V id of each node
	memVars  []uint32
	varIDs   []uint32
	iface    []uint32
	spv16    bool // the module is SPIR-V 1.6 (cooperative_matrix2, tensor addressing)
	glsl     uint32
	glslUsed bool
	loops    []loopLabels
	pushVar  uint32
	pushPtr  []uint32
	// vmm: the module uses the Vulkan memory model (see UseVulkanMemoryModel).
	vmm bool
	// emu: matrices are emulated (emulate.go); extraVars are the function variables the
	// emulation declares, spliced into the entry block at varsAt.
	emu       bool
	extraVars []uint32
	varsAt    int
}

type loopLabels struct{ merge, cont uint32 }

func newEmitter(b *Builder) *emitter {
	return &emitter{
		b: b, next: 1,
		types:   map[string]uint32{},
		consts:  map[[2]uint32]uint32{},
		vals:    make([]uint32, len(b.nodes)),
		memVars: make([]uint32, len(b.mems)),
		varIDs:  make([]uint32, len(b.vars)),
		vmm:     b.vmm || b.usesMatrices(),
		emu:     b.emulate,
	}
}

func (e *emitter) id() uint32 { e.next++; return e.next - 1 }

// inst appends an instruction to a section.
func inst(sec *[]uint32, op opcode, words ...uint32) {
	*sec = append(*sec, uint32(len(words)+1)<<16|uint32(op))
	*sec = append(*sec, words...)
}

// str encodes a literal string: UTF-8, NUL-terminated, padded to a word.
func str(s string) []uint32 {
	bs := append([]byte(s), 0)
	for len(bs)%4 != 0 {
		bs = append(bs, 0)
	}
	w := make([]uint32, len(bs)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(bs[4*i:])
	}
	return w
}

func (e *emitter) name(id uint32, s string) {
	if s != "" {
		inst(&e.names, opName, append([]uint32{id}, str(s)...)...)
	}
}

func (e *emitter) decorate(id uint32, dec uint32, args ...uint32) {
	inst(&e.annots, opDecorate, append([]uint32{id, dec}, args...)...)
}

// typ returns the id of a scalar or vector type.
func (e *emitter) typ(t Type) uint32 {
	key := t.String()
	if id, ok := e.types[key]; ok {
		return id
	}
	var id uint32
	if t.IsMatrix() && e.emu {
		id = e.emuArray(t)
	} else if t.IsMatrix() {
		id = e.matrixType(t)
	} else if t.IsVector() {
		el := e.typ(t.Elem())
		id = e.id()
		inst(&e.globals, opTypeVector, id, el, uint32(t.n))
	} else {
		id = e.id()
		switch t.kind {
		case BoolKind:
			inst(&e.globals, opTypeBool, id)
		case I32Kind:
			inst(&e.globals, opTypeInt, id, 32, 1)
		case U32Kind:
			inst(&e.globals, opTypeInt, id, 32, 0)
		case F32Kind:
			inst(&e.globals, opTypeFloat, id, 32)
		case F16Kind:
			inst(&e.globals, opTypeFloat, id, 16)
		case BF16Kind:
			inst(&e.globals, opTypeFloat, id, 16, fpEncodingBFloat16KHR)
			e.feats |= FeatureBFloat16
		default:
			panic("codegen: emit invalid type")
		}
	}
	e.types[key] = id
	return id
}

// matrixType emits OpTypeCooperativeMatrixKHR for t and records what it needs.
func (e *emitter) matrixType(t Type) uint32 {
	el := e.typ(t.Elem())
	id := e.id()
	inst(&e.globals, opTypeCooperativeMatrixKHR, id, el, e.constant(U32, uint32(t.scope)),
		e.constant(U32, uint32(t.rows)), e.constant(U32, uint32(t.cols)), e.constant(U32, t.use.spirv()))
	e.feats |= FeatureCooperativeMatrix | FeatureVulkanMemoryModel
	if t.MatrixScope() == ScopeWorkgroup {
		e.feats |= FeatureCooperativeMatrix2
		e.spv16 = true
	}
	switch t.kind {
	case F16Kind:
		e.feats |= FeatureFloat16
	case BF16Kind:
		e.feats |= FeatureBFloat16Matrix
	}
	return id
}

// derived returns the id of a composite type keyed by key, creating it with mk.
func (e *emitter) derived(key string, mk func(id uint32)) uint32 {
	if id, ok := e.types[key]; ok {
		return id
	}
	id := e.id()
	mk(id)
	e.types[key] = id
	return id
}

func (e *emitter) ptr(sc uint32, pointee uint32) uint32 {
	return e.derived(fmt.Sprintf("ptr %d %d", sc, pointee), func(id uint32) {
		inst(&e.globals, opTypePointer, id, sc, pointee)
	})
}

func (e *emitter) void() uint32 {
	return e.derived("void", func(id uint32) { inst(&e.globals, opTypeVoid, id) })
}

func (e *emitter) constant(t Type, bits uint32) uint32 {
	tid := e.typ(t)
	key := [2]uint32{tid, bits}
	if id, ok := e.consts[key]; ok {
		return id
	}
	id := e.id()
	switch {
	case t == Bool && bits != 0:
		inst(&e.globals, opConstantTrue, tid, id)
	case t == Bool:
		inst(&e.globals, opConstantFalse, tid, id)
	default:
		inst(&e.globals, opConstant, tid, id, bits)
	}
	e.consts[key] = id
	return id
}

// use records the features an f16 type in a node needs: storage-only uses (loads and stores of
// buffers and push constants, conversions) need 16-bit storage, every other use Float16.
func (e *emitter) useF16(n *node, storage Feature) {
	if e.hasF16(n) {
		e.feats |= storage
	}
}

// hasF16 reports whether node n's value or an operand is f16.
func (e *emitter) hasF16(n *node) bool {
	has := n.t.kind == F16Kind
	for _, o := range n.ops {
		if !o.isLit && e.b.nodes[o.id].t.kind == F16Kind {
			has = true
		}
	}
	return has
}

// narrows reports whether conversion n makes a float narrower (f32 to f16 or bf16).
func (e *emitter) narrows(n *node) bool {
	from := e.b.nodes[n.ops[0].id].t
	return n.t.Elem().Size() < from.Elem().Size()
}

// val returns the SPIR-V id of a node's value, emitting module-level values on first use.
func (e *emitter) val(id int32) uint32 {
	if e.vals[id] != 0 {
		return e.vals[id]
	}
	n := &e.b.nodes[id]
	switch n.kind {
	case kConst:
		e.useF16(n, FeatureFloat16)
		e.vals[id] = e.constant(n.t, n.lit)
	case kSpec:
		r := e.id()
		tid := e.typ(n.t)
		switch {
		case n.t == Bool && n.lit != 0:
			inst(&e.globals, opSpecConstantTrue, tid, r)
		case n.t == Bool:
			inst(&e.globals, opSpecConstantFalse, tid, r)
		default:
			inst(&e.globals, opSpecConstant, tid, r, n.lit)
		}
		e.decorate(r, decSpecId, uint32(n.mem))
		e.name(r, e.b.specs[n.mem].Name)
		e.vals[id] = r
	case kSpecOp:
		e.useF16(n, FeatureFloat16)
		words := []uint32{e.typ(n.t), 0, uint32(n.op)}
		for _, o := range n.ops {
			words = append(words, e.val(o.id))
		}
		r := e.id()
		words[1] = r
		inst(&e.globals, opSpecConstantOp, words...)
		e.vals[id] = r
	default:
		panic(fmt.Sprintf("codegen: value %%%d (%s) used before it is emitted", id, kindName(n.kind)))
	}
	return e.vals[id]
}

// module emits the whole module.
func (e *emitter) module() []uint32 {
	b := e.b
	e.glsl = e.id()
	mainID := e.id()

	// Interface: buffers.
	for i, m := range b.mems {
		switch m.kind {
		case memBuffer:
			e.memVars[i] = e.buffer(m)
		case memShared:
			at := e.array(m)
			v := e.id()
			inst(&e.globals, opVariable, e.ptr(scWorkgroup, at), v, scWorkgroup)
			e.name(v, m.name)
			e.memVars[i] = v
			if m.elem.kind == F16Kind {
				e.feats |= FeatureFloat16
			}
		case memLocal:
			if m.elem.kind == F16Kind {
				e.feats |= FeatureFloat16
			}
		}
	}
	e.pushBlock()
	// Every declared specialization constant is in the module, used or not, so Kernel.Specs and
	// the module's SpecIds always agree.
	for id := range b.nodes {
		if b.nodes[id].kind == kSpec {
			e.val(int32(id))
		}
	}

	// Workgroup size.
	var wgDefault [3]uint32
	wgSpec := false
	for i := range wgDefault {
		wgDefault[i] = 1
		if b.wgSet {
			n := b.nodes[b.wg[i].id]
			wgDefault[i] = n.lit
			wgSpec = wgSpec || n.kind == kSpec
		}
	}
	if wgSpec {
		r := e.id()
		inst(&e.globals, opSpecConstantComposite, e.typ(Vec(U32, 3)), r, e.val(b.wg[0].id), e.val(b.wg[1].id), e.val(b.wg[2].id))
		e.decorate(r, decBuiltIn, builtInWorkgroupSize)
	}

	// The function.
	void := e.void()
	fnType := e.derived("fn void", func(id uint32) { inst(&e.globals, opTypeFunction, id, void) })
	inst(&e.fn, opFunction, void, mainID, functionNone, fnType)
	inst(&e.fn, opLabel, e.id())
	for i, v := range b.vars {
		id := e.id()
		inst(&e.fn, opVariable, e.ptr(scFunction, e.typ(v.T)), id, scFunction)
		e.name(id, v.Name)
		e.varIDs[i] = id
		if v.T.kind == F16Kind {
			e.feats |= FeatureFloat16
		}
	}
	for i, m := range b.mems {
		if m.kind == memLocal {
			id := e.id()
			inst(&e.fn, opVariable, e.ptr(scFunction, e.array(m)), id, scFunction)
			e.name(id, m.name)
			e.memVars[i] = id
		}
	}
	e.varsAt = len(e.fn)
	// Entry values: push constants and built-ins, loaded once so they dominate every use.
	for _, id := range b.pushIDs {
		n := &b.nodes[id]
		e.useF16(n, FeaturePushConstant16)
		ptr := e.id()
		inst(&e.fn, opAccessChain, e.ptr(scPushConstant, e.typ(n.t)), ptr, e.pushVar, e.constant(I32, uint32(n.mem)))
		r := e.id()
		inst(&e.fn, opLoad, e.typ(n.t), r, ptr)
		e.vals[id] = r
	}
	bis := make([]uint32, 0, len(b.builtins))
	for bi := range b.builtins {
		bis = append(bis, bi)
	}
	sort.Slice(bis, func(i, j int) bool { return bis[i] < bis[j] })
	for _, bi := range bis {
		id := b.builtins[bi]
		n := &b.nodes[id]
		v := e.id()
		inst(&e.globals, opVariable, e.ptr(scInput, e.typ(n.t)), v, scInput)
		e.decorate(v, decBuiltIn, bi)
		e.iface = append(e.iface, v)
		if bi == builtInSubgroupSize || bi == builtInSubgroupLocalInvocationId || bi == builtInSubgroupId || bi == builtInNumSubgroups {
			e.feats |= FeatureSubgroupBasic
		}
		r := e.id()
		inst(&e.fn, opLoad, e.typ(n.t), r, v)
		e.vals[id] = r
	}
	if !e.block(b.body) {
		inst(&e.fn, opReturn)
	}
	inst(&e.fn, opFunctionEnd)
	if len(e.extraVars) > 0 {
		e.fn = append(e.fn[:e.varsAt], append(e.extraVars, e.fn[e.varsAt:]...)...)
	}

	if e.vmm {
		e.feats |= FeatureVulkanMemoryModel
	}
	if e.f16conv && !e.feats.Has(FeatureStorageBuffer16) && !e.feats.Has(FeatureFloat16) {
		// f16 values only rounded through (an epilogue storing what the unfused f16 op would
		// have), with no 16-bit buffer: SPIR-V then needs Float16 for the type.
		e.feats |= FeatureFloat16
	}
	// Assemble, in the order the SPIR-V logical layout requires.
	var out []uint32
	version := uint32(spirvVersion)
	if e.spv16 {
		// From SPIR-V 1.4 the entry point lists every global variable it uses, not only inputs.
		version = 0x00010600
		e.iface = append(e.iface, globalVariables(e.globals, e.iface)...)
	}
	out = append(out, 0x07230203, version, 0, 0, 0)
	caps := e.capList()
	for _, c := range caps {
		inst(&out, opCapability, c)
	}
	seen := map[string]bool{}
	for _, c := range caps {
		info := capabilityInfo[c]
		if (info.version == 0 || info.version > version) && len(info.extensions) > 0 && !seen[info.extensions[0]] {
			seen[info.extensions[0]] = true
			e.exts = append(e.exts, info.extensions[0])
		}
	}
	sort.Strings(e.exts)
	for _, x := range e.exts {
		inst(&out, opExtension, str(x)...)
	}
	if e.glslUsed {
		inst(&out, opExtInstImport, append([]uint32{e.glsl}, str("GLSL.std.450")...)...)
	}
	if e.vmm {
		inst(&out, opMemoryModel, addressingLogical, memoryModelVulkan)
	} else {
		inst(&out, opMemoryModel, addressingLogical, memoryModelGLSL450)
	}
	inst(&out, opEntryPoint, append(append([]uint32{modelGLCompute, mainID}, str("main")...), e.iface...)...)
	inst(&out, opExecutionMode, mainID, modeLocalSize, wgDefault[0], wgDefault[1], wgDefault[2])
	e.name(mainID, "main")
	out = append(out, e.names...)
	out = append(out, e.annots...)
	out = append(out, e.globals...)
	out = append(out, e.fn...)
	out[3] = e.next // bound
	return out
}

// capList is the sorted list of capabilities the module declares.
func (e *emitter) capList() []uint32 {
	set := map[uint32]bool{capShader: true}
	for f, caps := range featureCaps {
		if e.feats.Has(f) {
			for _, c := range caps {
				set[c] = true
			}
		}
	}
	var out []uint32
	for c := range set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (e *emitter) buffer(m memObj) uint32 {
	if m.elem.kind == F16Kind || m.elem.kind == BF16Kind {
		e.feats |= FeatureStorageBuffer16 // the declaration alone needs it, even if never accessed
	}
	el := e.typ(m.elem)
	rt := e.derived("rtarray "+m.elem.String(), func(id uint32) {
		inst(&e.globals, opTypeRuntimeArray, id, el)
		e.decorate(id, decArrayStride, uint32(m.elem.Size()))
	})
	st := e.id()
	inst(&e.globals, opTypeStruct, st, rt)
	e.decorate(st, decBlock)
	inst(&e.annots, opMemberDecorate, st, 0, decOffset, 0)
	switch m.access {
	case ReadOnly:
		inst(&e.annots, opMemberDecorate, st, 0, decNonWritable)
	case WriteOnly:
		inst(&e.annots, opMemberDecorate, st, 0, decNonReadable)
	}
	v := e.id()
	inst(&e.globals, opVariable, e.ptr(scStorageBuffer, st), v, scStorageBuffer)
	e.decorate(v, decDescriptorSet, 0)
	e.decorate(v, decBinding, uint32(m.buf.Binding))
	if m.buf.Options&Aliased != 0 {
		e.decorate(v, decAliased)
	}
	if m.buf.Options&Restrict != 0 {
		e.decorate(v, decRestrict)
	}
	if m.buf.Options&Coherent != 0 && !e.vmm {
		// Under the Vulkan memory model the decoration is banned; accesses carry the
		// availability and visibility operands instead (memOperands).
		e.decorate(v, decCoherent)
	}
	e.name(v, m.name)
	return v
}

func (e *emitter) array(m memObj) uint32 {
	el := e.typ(m.elem)
	n := e.val(m.length.id)
	return e.derived(fmt.Sprintf("array %d %d", el, n), func(id uint32) {
		inst(&e.globals, opTypeArray, id, el, n)
	})
}

func (e *emitter) pushBlock() {
	b := e.b
	if len(b.push) == 0 {
		return
	}
	words := []uint32{0}
	for _, p := range b.push {
		words = append(words, e.typ(p.Type))
	}
	st := e.id()
	words[0] = st
	inst(&e.globals, opTypeStruct, words...)
	e.decorate(st, decBlock)
	for i, p := range b.push {
		inst(&e.annots, opMemberDecorate, st, uint32(i), decOffset, uint32(p.Offset))
		inst(&e.names, opMemberName, append([]uint32{st, uint32(i)}, str(p.Name)...)...)
	}
	e.pushVar = e.id()
	inst(&e.globals, opVariable, e.ptr(scPushConstant, st), e.pushVar, scPushConstant)
	e.name(e.pushVar, "push")
}

// elemPtr emits an access chain to element idx of memory object mem.
func (e *emitter) elemPtr(mem int32, idx int32) uint32 {
	m := e.b.mems[mem]
	sc := map[memKind]uint32{memBuffer: scStorageBuffer, memShared: scWorkgroup, memLocal: scFunction}[m.kind]
	p := e.id()
	if m.kind == memBuffer {
		inst(&e.fn, opAccessChain, e.ptr(sc, e.typ(m.elem)), p, e.memVars[mem], e.constant(I32, 0), e.val(idx))
	} else {
		inst(&e.fn, opAccessChain, e.ptr(sc, e.typ(m.elem)), p, e.memVars[mem], e.val(idx))
	}
	return p
}

func (e *emitter) operands(n *node) []uint32 {
	w := make([]uint32, 0, len(n.ops))
	for _, o := range n.ops {
		if o.isLit {
			w = append(w, o.lit)
		} else {
			w = append(w, e.val(o.id))
		}
	}
	return w
}

// block emits the nodes of blk into the function and reports whether it ended in a branch
// (break, continue or return).
func (e *emitter) block(blk *block) bool {
	for _, id := range blk.nodes {
		n := &e.b.nodes[id]
		switch n.kind {
		case kInst:
			if e.emu && (n.t.IsMatrix() || n.op == opCooperativeMatrixLengthKHR || (n.op == opCompositeExtract && e.b.nodes[n.ops[0].id].t.IsMatrix())) {
				e.vals[id] = e.emuInst(n)
				continue
			}
			e.instFeatures(n)
			r := e.id()
			if n.op == opCooperativeMatrixLengthKHR {
				inst(&e.fn, n.op, e.typ(n.t), r, e.typ(n.aux))
			} else {
				inst(&e.fn, n.op, append([]uint32{e.typ(n.t), r}, e.operands(n)...)...)
			}
			if n.op == opFConvert && e.narrows(n) {
				// A conversion to a narrower float rounds, and kernels rely on it (f32→f16→f32
				// is the value an f16 tensor would hold): Mesa 25's lavapipe folds the pair away
				// unless the conversion is exact, which NoContraction says.
				e.decorate(r, decNoContraction)
			}
			e.vals[id] = r
		case kExt:
			e.useF16(n, FeatureFloat16)
			e.glslUsed = true
			r := e.id()
			inst(&e.fn, opExtInst, append([]uint32{e.typ(n.t), r, e.glsl, n.lit}, e.operands(n)...)...)
			e.vals[id] = r
		case kLoad:
			e.memFeatures(n, n.t)
			p := e.elemPtr(n.mem, n.ops[0].id)
			r := e.id()
			inst(&e.fn, opLoad, append([]uint32{e.typ(n.t), r, p}, e.memOperands(n.mem, false)...)...)
			e.vals[id] = r
		case kStore:
			e.memFeatures(n, e.b.mems[n.mem].elem)
			p := e.elemPtr(n.mem, n.ops[0].id)
			inst(&e.fn, opStore, append([]uint32{p, e.val(n.ops[1].id)}, e.memOperands(n.mem, true)...)...)
		case kMatLoad:
			e.memFeatures(n, e.b.mems[n.mem].elem)
			if e.emu {
				e.vals[id] = e.emuLoad(n)
				continue
			}
			p := e.elemPtr(n.mem, n.ops[0].id)
			r := e.id()
			words := []uint32{e.typ(n.t), r, p, e.constant(U32, matrixLayout(n.lit)), e.val(n.ops[1].id)}
			inst(&e.fn, opCooperativeMatrixLoadKHR, append(words, e.memOperands(n.mem, false)...)...)
			e.vals[id] = r
		case kMatStore:
			e.memFeatures(n, e.b.mems[n.mem].elem)
			if e.emu {
				e.emuStore(n)
				continue
			}
			p := e.elemPtr(n.mem, n.ops[0].id)
			words := []uint32{p, e.val(n.ops[1].id), e.constant(U32, matrixLayout(n.lit)), e.val(n.ops[2].id)}
			inst(&e.fn, opCooperativeMatrixStoreKHR, append(words, e.memOperands(n.mem, true)...)...)
		case kMatLoadTensor:
			e.vals[id] = e.matLoadTensor(n)
		case kMatStoreTensor:
			e.matStoreTensor(n)
		case kVarElemGet:
			p := e.id()
			inst(&e.fn, opAccessChain, e.ptr(scFunction, e.typ(n.t)), p, e.varIDs[n.mem], e.val(n.ops[0].id))
			r := e.id()
			inst(&e.fn, opLoad, e.typ(n.t), r, p)
			e.vals[id] = r
		case kVarElemSet:
			el := e.b.vars[n.mem].T.Elem()
			p := e.id()
			inst(&e.fn, opAccessChain, e.ptr(scFunction, e.typ(el)), p, e.varIDs[n.mem], e.val(n.ops[0].id))
			inst(&e.fn, opStore, p, e.val(n.ops[1].id))
		case kAtomic:
			p := e.elemPtr(n.mem, n.ops[0].id)
			r := e.id()
			scope := e.val(n.ops[2].id)
			if e.vmm && e.b.nodes[n.ops[2].id].lit == scopeDevice {
				scope = e.constant(U32, scopeQueueFamily)
			}
			inst(&e.fn, n.op, e.typ(n.t), r, p, scope, e.val(n.ops[3].id), e.val(n.ops[1].id))
			e.vals[id] = r
		case kArrayLen:
			r := e.id()
			inst(&e.fn, opArrayLength, e.typ(U32), r, e.memVars[n.mem], 0)
			e.vals[id] = r
		case kVarGet:
			if e.emu && n.t.IsMatrix() { // a snapshot: the variable may be set again
				v := e.tempVar(e.emuArray(n.t))
				e.emuCopy(v, e.varIDs[n.mem], n.t)
				e.vals[id] = v
				continue
			}
			r := e.id()
			inst(&e.fn, opLoad, e.typ(n.t), r, e.varIDs[n.mem])
			e.vals[id] = r
		case kVarSet:
			if t := e.b.vars[n.mem].T; e.emu && t.IsMatrix() {
				e.emuCopy(e.varIDs[n.mem], e.val(n.ops[0].id), t)
				continue
			}
			inst(&e.fn, opStore, e.varIDs[n.mem], e.val(n.ops[0].id))
		case kIf:
			c := e.val(n.ops[0].id)
			merge, then := e.id(), e.id()
			els := merge
			if len(n.blocks[1].nodes) > 0 {
				els = e.id()
			}
			inst(&e.fn, opSelectionMerge, merge, selectionNone)
			inst(&e.fn, opBranchConditional, c, then, els)
			inst(&e.fn, opLabel, then)
			if !e.block(n.blocks[0]) {
				inst(&e.fn, opBranch, merge)
			}
			if els != merge {
				inst(&e.fn, opLabel, els)
				if !e.block(n.blocks[1]) {
					inst(&e.fn, opBranch, merge)
				}
			}
			inst(&e.fn, opLabel, merge)
		case kLoop:
			header, body, cont, merge := e.id(), e.id(), e.id(), e.id()
			inst(&e.fn, opBranch, header)
			inst(&e.fn, opLabel, header)
			e.block(n.blocks[0])
			control := uint32(loopNone)
			if e.b.dontUnroll {
				control = loopDontUnroll
			}
			inst(&e.fn, opLoopMerge, merge, cont, control)
			if len(n.ops) > 0 {
				inst(&e.fn, opBranchConditional, e.val(n.ops[0].id), body, merge)
			} else {
				inst(&e.fn, opBranch, body)
			}
			inst(&e.fn, opLabel, body)
			e.loops = append(e.loops, loopLabels{merge, cont})
			if !e.block(n.blocks[1]) {
				inst(&e.fn, opBranch, cont)
			}
			e.loops = e.loops[:len(e.loops)-1]
			inst(&e.fn, opLabel, cont)
			e.block(n.blocks[2])
			inst(&e.fn, opBranch, header)
			inst(&e.fn, opLabel, merge)
		case kBreak:
			inst(&e.fn, opBranch, e.loops[len(e.loops)-1].merge)
			return true
		case kContinue:
			inst(&e.fn, opBranch, e.loops[len(e.loops)-1].cont)
			return true
		case kReturn:
			inst(&e.fn, opReturn)
			return true
		case kBarrier:
			inst(&e.fn, opControlBarrier, e.barrierOperands(n, 1)...)
		case kMemBarrier:
			inst(&e.fn, opMemoryBarrier, e.barrierOperands(n, 0)...)
		case kInvalid, kConst, kSpec, kSpecOp, kPush, kBuiltin:
			panic(fmt.Sprintf("codegen: %s node in a block", kindName(n.kind)))
		default:
			panic(fmt.Sprintf("codegen: emit: unknown node kind %d", n.kind))
		}
	}
	return false
}

// memOperands are the memory operands of a load (store false) or store of memory object mem: none
// outside the Vulkan memory model. Inside it:
//   - an access to a shared array is non-private (NonPrivatePointer), so that the barriers between
//     a write and another invocation's read, which make the workgroup's memory available and
//     visible (barrierOperands), order it. glslang also makes each access available or visible
//     (MakePointerAvailable/Visible, since GLSL's shared variables are implicitly coherent), which
//     is redundant with those barriers; lavapipe (Mesa 22.3) computed wrong results with it in a
//     tiled matmul (codegen's TestGPUMatmul), so it is left out.
//   - an access to a Coherent buffer is non-private and made visible (loads) or available
//     (stores) at the queue-family scope, which is what the Coherent decoration, banned under the
//     model, promised: other workgroups see the write without a barrier.
//
// Other buffer accesses stay private: a dispatch's invocations do not communicate through them.
func (e *emitter) memOperands(mem int32, store bool) []uint32 {
	if !e.vmm {
		return nil
	}
	m := e.b.mems[mem]
	switch {
	case m.kind == memShared:
		return []uint32{memAccessNonPrivatePointer}
	case m.kind == memBuffer && m.buf.Options&Coherent != 0:
		access := uint32(memAccessNonPrivatePointer | memAccessMakePointerVisible)
		if store {
			access = memAccessNonPrivatePointer | memAccessMakePointerAvailable
		}
		return []uint32{access, e.constant(U32, scopeQueueFamily)}
	}
	return nil
}

// barrierOperands are a barrier's scope and semantics ids, from operand first on (after the
// execution scope of a control barrier). Under the Vulkan memory model a device memory scope
// becomes the queue-family scope (which every invocation of a dispatch shares, and which needs no
// VulkanMemoryModelDeviceScope capability), and semantics that name memory also make it available
// and visible, as GLSL's barriers do under that model.
func (e *emitter) barrierOperands(n *node, first int) []uint32 {
	w := e.operands(n)
	if !e.vmm {
		return w
	}
	if e.b.nodes[n.ops[first].id].lit == scopeDevice {
		w[first] = e.constant(U32, scopeQueueFamily)
	}
	if sem := e.b.nodes[n.ops[first+1].id].lit; sem != 0 {
		w[first+1] = e.constant(U32, sem|semMakeAvailable|semMakeVisible)
	}
	return w
}

// matrixLayout is the CooperativeMatrixLayout enumerant of a MatrixLayout.
func matrixLayout(l uint32) uint32 {
	if MatrixLayout(l) == ColumnMajor {
		return matrixLayoutColumnMajorKHR
	}
	return matrixLayoutRowMajorKHR
}

// memFeatures records what a load or store of type t needs.
func (e *emitter) memFeatures(n *node, t Type) {
	if t.kind == BF16Kind && e.b.mems[n.mem].kind == memBuffer {
		e.feats |= FeatureStorageBuffer16
	}
	if t.kind != F16Kind {
		return
	}
	if e.b.mems[n.mem].kind == memBuffer {
		e.feats |= FeatureStorageBuffer16
	} else {
		e.feats |= FeatureFloat16
	}
}

// instFeatures records what a plain instruction needs.
func (e *emitter) instFeatures(n *node) {
	switch n.op {
	case opGroupNonUniformFAdd, opGroupNonUniformIAdd, opGroupNonUniformFMax, opGroupNonUniformSMax,
		opGroupNonUniformUMax, opGroupNonUniformFMin, opGroupNonUniformSMin, opGroupNonUniformUMin:
		e.feats |= FeatureSubgroupBasic | FeatureSubgroupArithmetic
	case opGroupNonUniformBroadcast, opGroupNonUniformBroadcastFirst:
		e.feats |= FeatureSubgroupBasic | FeatureSubgroupBallot
	case opGroupNonUniformShuffle, opGroupNonUniformShuffleXor:
		e.feats |= FeatureSubgroupBasic | FeatureSubgroupShuffle
	case opSDot, opSDotAccSat:
		e.feats |= FeatureIntegerDot
	}
	if n.op == opFConvert {
		// A conversion is a storage-only use of f16: 16-bit storage covers it when the module
		// has 16-bit buffers, else it needs Float16 (the end of module decides).
		e.f16conv = e.f16conv || e.hasF16(n)
		return
	}
	e.useF16(n, FeatureFloat16)
}
