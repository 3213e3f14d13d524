package codegen

// Structured control flow. Each construct takes callbacks that build its blocks; the emitter gives
// every construct its SPIR-V merge block (and loops their continue block), so the output is always
// structured. Values defined in a callback stay inside it; use a Var to carry a result out.

// If runs then when c (a bool) is true.
func (b *Builder) If(c Value, then func()) { b.IfElse(c, then, nil) }

// IfElse runs then when c is true and els (which may be nil) otherwise.
func (b *Builder) IfElse(c Value, then, els func()) {
	if !b.ok("If", c) {
		return
	}
	if c.t != Bool {
		b.errorf("If", "condition is %s, want bool", c.t)
		return
	}
	v := b.add(node{kind: kIf, ops: ids(c), divergent: b.divergent(c), lane: b.lane(c)}, true)
	n := &b.nodes[v.id]
	tb := &block{parent: b.cur, role: 0}
	eb := &block{parent: b.cur, role: 1}
	n.blocks = []*block{tb, eb}
	b.run(tb, v.id, then)
	b.run(eb, v.id, els)
}

// run builds blk with f (if not nil) as the current block.
func (b *Builder) run(blk *block, owner int32, f func()) {
	blk.owner = owner
	if f == nil {
		return
	}
	saved := b.cur
	b.cur = blk
	defer func() { b.cur = saved }()
	f()
}

// For runs body(i) for i = from; i < to; i += step, with from, to and step of one integer type
// (compared signed for i32, unsigned for u32). Break and Continue inside body apply to this loop.
func (b *Builder) For(from, to, step Value, body func(i Value)) {
	if !b.ok("For", from, to, step) {
		return
	}
	if !from.t.IsInt() || from.t.IsVector() || to.t != from.t || step.t != from.t {
		b.errorf("For", "from, to and step must be one integer scalar type, got %s, %s, %s", from.t, to.t, step.t)
		return
	}
	i := b.Var("i", from)
	b.loop("For", func() Value { return b.Lt(b.Get(i), to) },
		func() { body(b.Get(i)) },
		func() { b.Set(i, b.Add(b.Get(i), step)) })
}

// While runs body while cond() is true; cond builds its expression afresh for every test and may
// not contain statements.
func (b *Builder) While(cond func() Value, body func()) { b.loop("While", cond, body, nil) }

// Loop runs body until it breaks (or returns).
func (b *Builder) Loop(body func()) { b.loop("Loop", nil, body, nil) }

func (b *Builder) loop(construct string, cond func() Value, body, step func()) {
	if !b.ok(construct) {
		return
	}
	v := b.add(node{kind: kLoop}, true)
	cb := &block{parent: b.cur, role: 0}
	bb := &block{parent: cb, role: 1}
	sb := &block{parent: cb, role: 2}
	b.nodes[v.id].blocks = []*block{cb, bb, sb}
	if cond != nil {
		var c Value
		b.run(cb, v.id, func() {
			c = cond()
			if b.ok(construct, c) && c.t != Bool {
				b.errorf(construct, "condition is %s, want bool", c.t)
			}
		})
		for _, id := range cb.nodes {
			if k := b.nodes[id].kind; k >= kStore {
				b.errorf(construct, "the loop condition may not contain statements (%s)", kindName(k))
			}
		}
		b.nodes[v.id].ops = ids(c)
		b.nodes[v.id].divergent = b.divergent(c)
		b.nodes[v.id].lane = b.lane(c)
	} else {
		cb.owner = v.id
	}
	b.loops++
	b.run(bb, v.id, body)
	b.loops--
	b.run(sb, v.id, step)
}

// Break leaves the innermost loop. Nothing may follow it in the same block.
func (b *Builder) Break() { b.jump("Break", kBreak) }

// Continue goes to the next iteration of the innermost loop. Nothing may follow it in the same block.
func (b *Builder) Continue() { b.jump("Continue", kContinue) }

// Return ends the invocation. Nothing may follow it in the same block.
func (b *Builder) Return() { b.jump("Return", kReturn) }

func (b *Builder) jump(construct string, k kind) {
	if !b.ok(construct) {
		return
	}
	if k != kReturn && b.loops == 0 {
		b.errorf(construct, "outside a loop")
		return
	}
	b.add(node{kind: k}, true)
	b.cur.closed = true
}

func kindName(k kind) string {
	switch k {
	case kInvalid:
		return "invalid"
	case kConst:
		return "constant"
	case kSpec:
		return "specialization constant"
	case kSpecOp:
		return "constant expression"
	case kPush:
		return "push constant"
	case kBuiltin:
		return "built-in"
	case kInst, kExt:
		return "expression"
	case kLoad:
		return "load"
	case kArrayLen:
		return "length"
	case kVarGet:
		return "variable load"
	case kStore:
		return "store"
	case kAtomic:
		return "atomic"
	case kVarSet:
		return "variable store"
	case kIf:
		return "if"
	case kLoop:
		return "loop"
	case kBreak:
		return "break"
	case kContinue:
		return "continue"
	case kReturn:
		return "return"
	case kBarrier:
		return "barrier"
	case kMemBarrier:
		return "memory barrier"
	case kMatLoad:
		return "matrix load"
	case kMatStore:
		return "matrix store"
	case kMatLoadTensor:
		return "matrix tensor load"
	case kMatStoreTensor:
		return "matrix tensor store"
	case kVarElemGet:
		return "matrix component load"
	case kVarElemSet:
		return "matrix component store"
	}
	panic("codegen: unknown node kind")
}
