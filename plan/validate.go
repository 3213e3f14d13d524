package plan

import (
	"fmt"
	"math"
	"sort"
)

// Limits on what a plan may hold, so that a plan always fits the file format's u32 lengths with
// room to spare; real plans are far below them.
const (
	maxString = 1 << 16 // bytes of a name, key, label or note
	maxList   = 1 << 24 // elements of any list
)

// spirvMagic is the first word of every SPIR-V module, in the host's (little-endian) word order.
const spirvMagic = 0x07230203

// Validate checks the plan's internal consistency: every index points at something, every buffer
// range lies inside its region, names are unique, push constants and bindings match their module,
// and no two dispatches between barriers touch the same bytes when one of them writes. It returns
// nil or a *ValidationError listing the first problems found (errors.Is(err, ErrInvalid)).
//
// What it cannot check: the SPIR-V itself beyond its magic number (spirv-val does that in the
// codegen tests), device limits such as the storage-buffer offset alignment or the maximum
// push-constant size and workgroup count (the runtime checks those against the device), and
// whether the computation is right.
func (p *Plan) Validate() error {
	v := &validator{}
	v.check(p)
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems, More: v.more}
}

type validator struct {
	problems []string
	more     bool
}

func (v *validator) addf(format string, args ...any) {
	if len(v.problems) == maxProblems {
		v.more = true
		return
	}
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

func (v *validator) str(where, s string) {
	if len(s) > maxString {
		v.addf("%s: %d bytes long, more than %d", where, len(s), maxString)
	}
}

func (v *validator) list(where string, n int) bool {
	if n > maxList {
		v.addf("%s: %d elements, more than %d", where, n, maxList)
		return false
	}
	return true
}

// name checks that a name is non-empty, not too long and not seen before.
func (v *validator) name(where, name string, seen map[string]bool) {
	switch {
	case name == "":
		v.addf("%s: empty name", where)
	case seen[name]:
		v.addf("%s: duplicate name %q", where, name)
	}
	v.str(where, name)
	seen[name] = true
}

// inside reports whether [off, off+n) lies within [0, size), without overflow.
func inside(off, n, size uint64) bool { return off <= size && n <= size-off }

// tensorBytes checks dtype and shape and returns the logical size.
func (v *validator) tensorBytes(where string, t DType, shape []int64) (uint64, bool) {
	if !t.Valid() {
		v.addf("%s: unknown dtype %d", where, uint8(t))
		return 0, false
	}
	if !v.list(where+": shape", len(shape)) {
		return 0, false
	}
	n, err := t.Bytes(shape)
	if err != nil {
		v.addf("%s: %v", where, err)
		return 0, false
	}
	return uint64(n), true
}

func (v *validator) check(p *Plan) {
	v.str("compiler version", p.CompilerVersion)
	v.str("model", p.Model)
	v.str("device name", p.Device.DeviceName)
	for _, l := range []struct {
		what string
		n    int
	}{{"modules", len(p.Modules)}, {"weights", len(p.Weights.Tensors)}, {"state", len(p.State)},
		{"functions", len(p.Functions)}, {"rules", len(p.Record.Rules)},
		{"candidates", len(p.Record.Candidates)}, {"notes", len(p.Record.Notes)}} {
		if !v.list(l.what, l.n) {
			return
		}
	}
	for i := range p.Modules {
		v.module(i, &p.Modules[i])
	}
	v.memory(p)
	seen := map[string]bool{}
	for i := range p.Functions {
		f := &p.Functions[i]
		v.name(fmt.Sprintf("function %d", i), f.Name, seen)
		v.function(p, f)
		v.variants(p, f)
	}
	v.record(&p.Record)
	v.tokenizer(p.Tokenizer)
}

func (v *validator) config(where string, m map[string]int64) {
	if !v.list(where, len(m)) {
		return
	}
	for k := range m {
		if k == "" {
			v.addf("%s: empty parameter name", where)
		}
		v.str(where, k)
	}
}

func (v *validator) module(i int, m *Module) {
	where := fmt.Sprintf("module %d (%s)", i, m.Key)
	v.str(where+": key", m.Key)
	v.config(where+": config", m.Config)
	if m.Entry == "" {
		v.addf("%s: empty entry point name", where)
	}
	v.str(where+": entry", m.Entry)
	switch {
	case len(m.SPIRV) < 5:
		v.addf("%s: SPIR-V has %d words, shorter than its 5-word header", where, len(m.SPIRV))
	case m.SPIRV[0] != spirvMagic:
		v.addf("%s: SPIR-V starts with 0x%08x, not the magic number 0x%08x", where, m.SPIRV[0], spirvMagic)
	}
	v.list(where+": SPIR-V", len(m.SPIRV))
	if v.list(where+": bindings", len(m.Bindings)) {
		seen := map[uint32]bool{}
		for _, b := range m.Bindings {
			if seen[b.Binding] {
				v.addf("%s: binding %d declared twice", where, b.Binding)
			}
			seen[b.Binding] = true
			if b.Access != Read && b.Access != Write && b.Access != ReadWrite {
				v.addf("%s: binding %d: unknown access %d", where, b.Binding, b.Access)
			}
		}
	}
	if m.PushConstantSize%4 != 0 || m.PushConstantSize > maxString {
		v.addf("%s: push-constant size %d is not a multiple of 4 up to %d", where, m.PushConstantSize, maxString)
	}
	if v.list(where+": specialization constants", len(m.SpecConstants)) {
		seen := map[uint32]bool{}
		for _, s := range m.SpecConstants {
			if seen[s.ID] {
				v.addf("%s: specialization constant %d given twice", where, s.ID)
			}
			seen[s.ID] = true
		}
	}
	if m.Workgroup[0] == 0 || m.Workgroup[1] == 0 || m.Workgroup[2] == 0 {
		v.addf("%s: workgroup size %v has a zero dimension", where, m.Workgroup)
	}
}

// span is a byte range of a region used by a dispatch, for the hazard check.
type span struct {
	region   Region
	off, end uint64
	write    bool
	dispatch int
	binding  uint32
}

func (v *validator) memory(p *Plan) {
	w := &p.Weights
	seen := map[string]bool{}
	if w.Source == nil {
		switch {
		case w.Pieces != nil && w.Data != nil:
			v.addf("weights: both inline data and pieces")
		case w.Pieces != nil:
			end := uint64(0)
			for i, pc := range w.Pieces {
				switch {
				case pc.Offset < end:
					v.addf("weights: piece %d at byte %d overlaps or precedes the one before it (which ends at %d)", i, pc.Offset, end)
				case !inside(pc.Offset, pc.Size, w.Size):
					v.addf("weights: piece %d, bytes %d..%d+%d, lies outside the %d-byte weight region", i, pc.Offset, pc.Offset, pc.Size, w.Size)
				case pc.Data != nil && uint64(len(pc.Data)) != pc.Size:
					v.addf("weights: piece %d has %d bytes of data for a size of %d", i, len(pc.Data), pc.Size)
				case pc.Data == nil && pc.Size > 0 && pc.File == nil:
					v.addf("weights: piece %d has neither data nor a file", i)
				}
				if inside(pc.Offset, pc.Size, w.Size) {
					end = max(end, pc.Offset+pc.Size)
				}
			}
		case uint64(len(w.Data)) != w.Size:
			v.addf("weights: inline data has %d bytes, the region %d", len(w.Data), w.Size)
		}
	} else {
		if w.Pieces != nil {
			v.addf("weights: both pieces and an external source")
		}
		if w.Data != nil {
			v.addf("weights: both inline data and an external source")
		}
		if w.Source.Path == "" {
			v.addf("weights: external source with an empty path")
		}
		v.str("weights: source path", w.Source.Path)
	}
	for i, t := range w.Tensors {
		where := fmt.Sprintf("weight %d (%s)", i, t.Name)
		v.name(where, t.Name, seen)
		v.str(where+": layout", t.Layout)
		n, ok := v.tensorBytes(where, t.DType, t.Shape)
		if ok && t.Size < n {
			v.addf("%s: size %d is less than the %d bytes of %s%v", where, t.Size, n, t.DType, t.Shape)
		}
		if !inside(t.Offset, t.Size, w.Size) {
			v.addf("%s: bytes %d..%d+%d lie outside the %d-byte weight region", where, t.Offset, t.Offset, t.Size, w.Size)
		}
		if w.Source == nil {
			if t.SourceOffset != 0 {
				v.addf("%s: source offset %d but the weights are inline", where, t.SourceOffset)
			}
			continue
		}
		if t.Layout != "" || (ok && t.Size != n) {
			v.addf("%s: external weights are copied verbatim, so layout %q and size %d (logical %d) must be row-major and exact", where, t.Layout, t.Size, n)
		}
		if !inside(t.SourceOffset, t.Size, w.Source.Size) {
			v.addf("%s: source bytes %d..%d+%d lie outside the %d-byte file %s", where, t.SourceOffset, t.SourceOffset, t.Size, w.Source.Size, w.Source.Path)
		}
	}
	seen = map[string]bool{}
	for i, t := range p.State {
		where := fmt.Sprintf("state %d (%s)", i, t.Name)
		v.name(where, t.Name, seen)
		n, ok := v.tensorBytes(where, t.DType, t.Shape)
		switch {
		case ok && !inside(t.Offset, n, p.StateSize):
			v.addf("%s: bytes %d..%d+%d lie outside the %d-byte state region", where, t.Offset, t.Offset, n, p.StateSize)
		case ok && !p.StateSplit.Holds(t.Offset, n):
			v.addf("%s: bytes %d..%d+%d cross from one state buffer into the next", where, t.Offset, t.Offset, n)
		}
	}
	a := p.Arena.Align
	if a&(a-1) != 0 {
		v.addf("arena: alignment %d is not a power of two", a)
		a = 1
	}
	for _, r := range []struct {
		what  string
		size  uint64
		split Split
	}{{"weight region", w.Size, w.Split}, {"state region", p.StateSize, p.StateSplit}, {"arena", p.Arena.Size, p.Arena.Split}} {
		if !v.list(r.what+": buffers", len(r.split)) {
			continue
		}
		if bad := r.split.check(r.size); bad != "" {
			v.addf("%s: %s", r.what, bad)
			continue
		}
		for i, x := range r.split {
			if a > 1 && x%a != 0 {
				v.addf("%s: buffer %d begins at byte %d, not a multiple of the plan's alignment %d", r.what, i+1, x, a)
			}
		}
	}
	if bad := w.Split.check(w.Size); bad == "" {
		for i, t := range w.Tensors {
			if t.Size > 0 && inside(t.Offset, t.Size, w.Size) && !w.Split.Holds(t.Offset, t.Size) {
				v.addf("weight %d (%s): bytes %d..%d+%d cross from one weight buffer into the next", i, t.Name, t.Offset, t.Offset, t.Size)
			}
		}
	}
}

// values checks a function's inputs or outputs and returns each one's byte size (0 if invalid).
func (v *validator) values(p *Plan, f *Function, fwhere, kind string, vs []Value) []uint64 {
	sizes := make([]uint64, len(vs))
	if !v.list(fwhere+": "+kind+"s", len(vs)) {
		return nil
	}
	seen := map[string]bool{}
	var ranges []arenaRange
	for i, x := range vs {
		where := fmt.Sprintf("%s: %s %d (%s)", fwhere, kind, i, x.Name)
		v.name(where, x.Name, seen)
		n, ok := v.tensorBytes(where, x.DType, x.Shape)
		if !ok {
			continue
		}
		switch x.Place {
		case Staging:
			if x.Offset != 0 {
				v.addf("%s: offset %d but it is in a staging slot", where, x.Offset)
			}
		case InArena:
			if !inside(x.Offset, n, p.Arena.Size) {
				v.addf("%s: arena bytes %d..%d+%d lie outside the %d-byte arena", where, x.Offset, x.Offset, n, p.Arena.Size)
			} else if !p.Arena.Split.Holds(x.Offset, n) {
				v.addf("%s: arena bytes %d..%d+%d cross from one arena buffer into the next", where, x.Offset, x.Offset, n)
			}
		default:
			v.addf("%s: unknown placement %d", where, x.Place)
		}
		if x.Bounded {
			switch {
			case f.Length == nil:
				v.addf("%s: bounded, but the function has no run-time length", where)
			case len(x.Shape) == 0 || f.Length.Max == 0 || x.Shape[0]%int64(f.Length.Max) != 0:
				v.addf("%s: bounded, but its leading axis %v is not a multiple of the capacity %d", where, x.Shape, f.Length.Max)
			}
		}
		sizes[i] = n
		if x.Place == InArena && n > 0 {
			ranges = append(ranges, arenaRange{x.Offset, x.Offset + n, i})
		}
	}
	// The runtime copies arena-placed inputs in (or outputs out) together, so two of them must not
	// share bytes. Sorted by start, an overlap shows up between a range and the furthest-reaching
	// one before it.
	sort.Slice(ranges, func(a, b int) bool { return ranges[a].off < ranges[b].off })
	for k := 1; k < len(ranges); k++ {
		prev := ranges[k-1]
		if ranges[k].off < prev.end {
			v.addf("%s: %ss %d (%s) and %d (%s) overlap in the arena", fwhere, kind,
				prev.index, vs[prev.index].Name, ranges[k].index, vs[ranges[k].index].Name)
		}
		if prev.end > ranges[k].end {
			ranges[k].end, ranges[k].index = prev.end, prev.index
		}
	}
	return sizes
}

type arenaRange struct {
	off, end uint64
	index    int
}

func (v *validator) function(p *Plan, f *Function) {
	fwhere := fmt.Sprintf("function %q", f.Name)
	if l := f.Length; l != nil {
		v.str(fwhere+": length name", l.Name)
		if l.Min < 1 || l.Min > l.Max {
			v.addf("%s: run-time length %s has bounds %d..%d, want 1 ≤ min ≤ max", fwhere, l.Name, l.Min, l.Max)
		}
	}
	in := v.values(p, f, fwhere, "input", f.Inputs)
	out := v.values(p, f, fwhere, "output", f.Outputs)
	if in == nil && len(f.Inputs) > 0 || out == nil && len(f.Outputs) > 0 || !v.list(fwhere+": dispatches", len(f.Dispatches)) {
		return
	}
	regionSize := func(r Region) (uint64, string) {
		switch r.Kind {
		case RegionWeights, RegionState, RegionArena:
			if r.Index != 0 {
				return 0, fmt.Sprintf("%s region with index %d, want 0", r, r.Index)
			}
		}
		switch r.Kind {
		case RegionWeights:
			return p.Weights.Size, ""
		case RegionState:
			return p.StateSize, ""
		case RegionArena:
			return p.Arena.Size, ""
		case RegionLength:
			if f.Length == nil {
				return 0, "the length region, but the function has no run-time length"
			}
			if r.Index != 0 {
				return 0, fmt.Sprintf("%s region with index %d, want 0", r, r.Index)
			}
			return 4, ""
		case RegionInput, RegionOutput:
			vs, sizes, kind := f.Inputs, in, "input"
			if r.Kind == RegionOutput {
				vs, sizes, kind = f.Outputs, out, "output"
			}
			if uint64(r.Index) >= uint64(len(vs)) {
				return 0, fmt.Sprintf("%s %d does not exist (the function has %d)", kind, r.Index, len(vs))
			}
			if vs[r.Index].Place != Staging {
				return 0, fmt.Sprintf("%s %d (%s) is in the arena, not a staging slot; bind the arena range", kind, r.Index, vs[r.Index].Name)
			}
			return sizes[r.Index], ""
		}
		return 0, fmt.Sprintf("unknown region kind %d", r.Kind)
	}

	var interval []span // spans used since the last barrier
	for j := range f.Dispatches {
		d := &f.Dispatches[j]
		where := fmt.Sprintf("%s: dispatch %d", fwhere, j)
		if d.BarrierBefore {
			v.hazards(fwhere, interval)
			interval = interval[:0]
		}
		v.str(where+": label", d.Label)
		if v.list(where+": ops", len(d.Ops)) {
			for _, op := range d.Ops {
				v.str(where+": op", op)
			}
		}
		if d.Grid[0] == 0 || d.Grid[1] == 0 || d.Grid[2] == 0 {
			v.addf("%s: grid %v has a zero dimension", where, d.Grid)
		}
		if sc := d.Scale; sc != nil {
			switch {
			case f.Length == nil:
				v.addf("%s: a grid scale, but the function has no run-time length", where)
			case sc.Axis > LinearAxis || sc.Num == 0 || sc.Den == 0:
				v.addf("%s: grid scale axis %d, %d/%d: want axis 0..%d and a positive ratio", where, sc.Axis, sc.Num, sc.Den, LinearAxis)
			}
		}
		if d.Estimated < 0 || d.Measured < 0 {
			v.addf("%s: negative time", where)
		}
		v.work(where, f, &d.Work)
		if uint64(d.Module) >= uint64(len(p.Modules)) {
			v.addf("%s: module %d does not exist (the plan has %d)", where, d.Module, len(p.Modules))
			continue
		}
		m := &p.Modules[d.Module]
		where = fmt.Sprintf("%s (%s)", where, m.Key)

		if uint64(len(d.Push)) != uint64(m.PushConstantSize) {
			v.addf("%s: %d push-constant bytes, the module takes %d", where, len(d.Push), m.PushConstantSize)
		}
		if v.list(where+": scalars", len(d.Scalars)) {
			used := map[uint32]bool{}
			for _, s := range d.Scalars {
				if s.Offset%4 != 0 || !inside(uint64(s.Offset), 4, uint64(len(d.Push))) {
					v.addf("%s: scalar slot at byte %d is not an aligned word of the %d push-constant bytes", where, s.Offset, len(d.Push))
				}
				if used[s.Offset] {
					v.addf("%s: two scalar slots at byte %d", where, s.Offset)
				}
				used[s.Offset] = true
				if uint64(s.Input) >= uint64(len(f.Inputs)) {
					v.addf("%s: scalar slot at byte %d reads input %d, but the function has %d", where, s.Offset, s.Input, len(f.Inputs))
					continue
				}
				x := &f.Inputs[s.Input]
				if n, _ := Elements(x.Shape); n != 1 || (x.DType != I32 && x.DType != U32) {
					v.addf("%s: scalar slot at byte %d reads input %q, which is %s%v, not an i32 or u32 scalar", where, s.Offset, x.Name, x.DType, x.Shape)
				}
			}
		}

		decl := map[uint32]Access{}
		for _, b := range m.Bindings {
			decl[b.Binding] = b.Access
		}
		if !v.list(where+": bindings", len(d.Bindings)) {
			continue
		}
		bound := map[uint32]bool{}
		var spans []span
		for _, b := range d.Bindings {
			bwhere := fmt.Sprintf("%s: binding %d", where, b.Binding)
			acc, ok := decl[b.Binding]
			if !ok {
				v.addf("%s: the module declares no such binding", bwhere)
				continue
			}
			if bound[b.Binding] {
				v.addf("%s: bound twice", bwhere)
				continue
			}
			bound[b.Binding] = true
			size, bad := regionSize(b.Buffer.Region)
			if bad != "" {
				v.addf("%s: %s", bwhere, bad)
				continue
			}
			r := b.Buffer
			if r.Range == 0 {
				v.addf("%s: empty range", bwhere)
				continue
			}
			if !inside(r.Offset, r.Range, size) {
				v.addf("%s: %s bytes %d..%d+%d lie outside the %d-byte region", bwhere, r.Region, r.Offset, r.Offset, r.Range, size)
				continue
			}
			if !p.splitOf(r.Region).Holds(r.Offset, r.Range) {
				v.addf("%s: %s bytes %d..%d+%d cross from one of the region's buffers into the next", bwhere, r.Region, r.Offset, r.Offset, r.Range)
				continue
			}
			if (r.Region.Kind == RegionWeights || r.Region.Kind == RegionLength) && acc.writes() {
				v.addf("%s: writes the read-only %s region", bwhere, map[RegionKind]string{RegionWeights: "weight", RegionLength: "length"}[r.Region.Kind])
			}
			spans = append(spans, span{r.Region, r.Offset, r.Offset + r.Range, acc.writes(), j, b.Binding})
		}
		if len(bound) != len(decl) {
			var missing []uint32
			for b := range decl {
				if !bound[b] {
					missing = append(missing, b)
				}
			}
			sort.Slice(missing, func(a, b int) bool { return missing[a] < missing[b] })
			v.addf("%s: bindings %v are declared by the module but not bound", where, missing)
		}
		interval = append(interval, spans...)
	}
	v.hazards(fwhere, interval)
	v.ranges(fwhere, f)
}

// maxPlus bounds Range.Plus: a bound that depends on more than a few run-time scalars is not one
// a compiler writes, and the runtime sums them per element.
const maxPlus = 8

func (v *validator) ranges(fwhere string, f *Function) {
	if !v.list(fwhere+": ranges", len(f.Ranges)) {
		return
	}
	intInput := func(i uint32) (*Value, bool) {
		if uint64(i) >= uint64(len(f.Inputs)) {
			return nil, false
		}
		x := &f.Inputs[i]
		return x, x.DType == I32 || x.DType == U32
	}
	for k, r := range f.Ranges {
		where := fmt.Sprintf("%s: range %d", fwhere, k)
		v.str(where, r.MinWhy)
		v.str(where, r.MaxWhy)
		x, ok := intInput(r.Input)
		switch {
		case x == nil:
			v.addf("%s: input %d does not exist (the function has %d)", where, r.Input, len(f.Inputs))
			continue
		case !ok:
			v.addf("%s: input %q is %s, not an i32 or u32 tensor", where, x.Name, x.DType)
		}
		if r.Min > r.Max {
			v.addf("%s (input %s): minimum %d exceeds maximum %d", where, x.Name, r.Min, r.Max)
		}
		if r.PlusLength && f.Length == nil {
			v.addf("%s (input %s): adds the run-time length, but the function has none", where, x.Name)
		}
		if len(r.Plus) > maxPlus {
			v.addf("%s (input %s): %d scalars added, more than %d", where, x.Name, len(r.Plus), maxPlus)
			continue
		}
		seen := map[uint32]bool{r.Input: true}
		for _, p := range r.Plus {
			y, ok := intInput(p)
			switch {
			case y == nil:
				v.addf("%s (input %s): added input %d does not exist (the function has %d)", where, x.Name, p, len(f.Inputs))
				continue
			case seen[p]:
				v.addf("%s (input %s): input %s added twice", where, x.Name, y.Name)
			}
			seen[p] = true
			if n, _ := Elements(y.Shape); !ok || n != 1 {
				v.addf("%s (input %s): added input %s is %s%v, not an i32 or u32 scalar", where, x.Name, y.Name, y.DType, y.Shape)
			}
		}
	}
}

// variants checks the variants of f (Function.Variants): each the same function for a range of
// lengths within f's, disjoint from the others', with f's inputs and outputs at its capacity, and
// valid as a function itself.
func (v *validator) variants(p *Plan, f *Function) {
	if len(f.Variants) == 0 {
		return
	}
	fwhere := fmt.Sprintf("function %q", f.Name)
	l := f.Length
	if l == nil {
		v.addf("%s: %d variants, but no run-time length", fwhere, len(f.Variants))
		return
	}
	if !v.list(fwhere+": variants", len(f.Variants)) {
		return
	}
	for i := range f.Variants {
		g := &f.Variants[i]
		where := fmt.Sprintf("%s: variant %d", fwhere, i)
		gl := g.Length
		switch {
		case g.Name != f.Name:
			v.addf("%s is named %q", where, g.Name)
			continue
		case len(g.Variants) > 0:
			v.addf("%s has variants of its own", where)
			continue
		case gl == nil || gl.Name != l.Name:
			v.addf("%s does not have the run-time length %s", where, l.Name)
			continue
		case gl.Min < l.Min || gl.Max >= l.Max || gl.Min > gl.Max:
			v.addf("%s: lengths %d..%d, want a range within %d..%d below its maximum", where, gl.Min, gl.Max, l.Min, l.Max)
			continue
		}
		for j := range f.Variants[:i] {
			h := f.Variants[j].Length
			if h != nil && gl.Min <= h.Max && h.Min <= gl.Max {
				v.addf("%s: lengths %d..%d overlap variant %d's %d..%d", where, gl.Min, gl.Max, j, h.Min, h.Max)
			}
		}
		same := func(kind string, a, b []Value) {
			if len(a) != len(b) {
				v.addf("%s: %d %ss, the function has %d", where, len(b), kind, len(a))
				return
			}
			for k := range a {
				x, y := &a[k], &b[k]
				ok := x.Name == y.Name && x.DType == y.DType && x.Bounded == y.Bounded && len(x.Shape) == len(y.Shape)
				for d := 1; ok && d < len(x.Shape); d++ {
					ok = x.Shape[d] == y.Shape[d]
				}
				if ok && len(x.Shape) > 0 {
					if x.Bounded {
						ok = y.Shape[0]%int64(gl.Max) == 0 && x.Shape[0]/int64(l.Max) == y.Shape[0]/int64(gl.Max)
					} else {
						ok = x.Shape[0] == y.Shape[0]
					}
				}
				if !ok {
					v.addf("%s: %s %d is %s %s%v (bounded %v), the function's %s %s%v (bounded %v)", where, kind, k,
						y.Name, y.DType, y.Shape, y.Bounded, x.Name, x.DType, x.Shape, x.Bounded)
				}
			}
		}
		same("input", f.Inputs, g.Inputs)
		same("output", f.Outputs, g.Outputs)
		v.function(p, g)
	}
}

// hazards reports pairs of dispatches of one barrier interval that use overlapping bytes of a
// region where at least one of them writes. A dispatch may read and write overlapping ranges through
// its own bindings (an in-place kernel). The spans are sorted and swept, comparing each only with
// the earlier spans that still overlap it, and a read only with writes; so reading the same weights
// from many dispatches costs nothing.
func (v *validator) hazards(fwhere string, spans []span) {
	sort.Slice(spans, func(a, b int) bool {
		x, y := spans[a], spans[b]
		if x.region != y.region {
			return x.region.Kind < y.region.Kind || x.region.Kind == y.region.Kind && x.region.Index < y.region.Index
		}
		if x.off != y.off {
			return x.off < y.off
		}
		if x.dispatch != y.dispatch {
			return x.dispatch < y.dispatch
		}
		return x.binding < y.binding
	})
	var writes, reads []span // earlier spans of the current region that may still overlap
	prune := func(a []span, off uint64) []span {
		k := 0
		for _, t := range a {
			if t.end > off {
				a[k] = t
				k++
			}
		}
		return a[:k]
	}
	for i, s := range spans {
		if i > 0 && spans[i-1].region != s.region {
			writes, reads = writes[:0], reads[:0]
		}
		writes, reads = prune(writes, s.off), prune(reads, s.off)
		against := writes
		if s.write {
			against = append(append([]span(nil), writes...), reads...)
		}
		for _, t := range against {
			if t.dispatch == s.dispatch {
				continue
			}
			if v.more {
				return
			}
			first, second := t, s
			if first.dispatch > second.dispatch {
				first, second = second, first
			}
			v.addf("%s: dispatch %d (binding %d) and dispatch %d (binding %d) use overlapping %s bytes %d..%d and %d..%d in one barrier interval, and %s; a barrier is missing",
				fwhere, first.dispatch, first.binding, second.dispatch, second.binding, s.region,
				first.off, first.end, second.off, second.end, writer(first, second))
		}
		if s.write {
			writes = append(writes, s)
		} else {
			reads = append(reads, s)
		}
	}
}

func writer(a, b span) string {
	switch {
	case a.write && b.write:
		return "both write"
	case a.write:
		return fmt.Sprintf("dispatch %d writes", a.dispatch)
	}
	return fmt.Sprintf("dispatch %d writes", b.dispatch)
}

func (v *validator) record(r *Record) {
	for i, rc := range r.Rules {
		if rc.Name == "" {
			v.addf("record: rule %d has an empty name", i)
		}
		v.str("record: rule", rc.Name)
	}
	for i, c := range r.Candidates {
		where := fmt.Sprintf("record: candidate %d", i)
		v.str(where, c.Subject)
		v.str(where, c.Kernel)
		v.str(where, c.Note)
		v.config(where+": config", c.Config)
		if c.Estimated < 0 || c.Measured < 0 {
			v.addf("%s: negative time", where)
		}
	}
	for _, n := range r.Notes {
		v.str("record: note", n)
	}
	switch r.ChosenBy {
	case "", ChosenStatic, ChosenMeasured:
	default:
		v.addf("record: chosen by %q, want %q or %q", r.ChosenBy, ChosenStatic, ChosenMeasured)
	}
}

// work checks a dispatch's Work: finite figures; terms with a length power only in a function
// with a run-time length (at most n²), with a count only when there is one; a count over scalar
// integer inputs of f with Min ≤ Max; and no negative work at the corners of the run-time range.
func (v *validator) work(where string, f *Function, w *Work) {
	finite := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
		return true
	}
	if !finite(w.FLOPs, w.Bytes) {
		v.addf("%s: work %g FLOPs, %g bytes is not finite", where, w.FLOPs, w.Bytes)
		return
	}
	if !v.list(where+": work terms", len(w.Terms)) {
		return
	}
	for i, t := range w.Terms {
		switch {
		case !finite(t.FLOPs, t.Bytes):
			v.addf("%s: work term %d: %g FLOPs, %g bytes is not finite", where, i, t.FLOPs, t.Bytes)
		case t.Length > 2:
			v.addf("%s: work term %d: the run-time length to the power %d (at most 2)", where, i, t.Length)
		case t.Length > 0 && f.Length == nil:
			v.addf("%s: work term %d follows the run-time length, but the function has none", where, i)
		case t.Count && w.Count == nil:
			v.addf("%s: work term %d follows a count, but the work defines none", where, i)
		default:
			continue
		}
		return
	}
	ns := []float64{0}
	if f.Length != nil {
		ns = []float64{float64(f.Length.Min), float64(f.Length.Max)}
	}
	cs := []float64{0}
	if c := w.Count; c != nil {
		if c.Min > c.Max {
			v.addf("%s: work count [%d, %d] is empty", where, c.Min, c.Max)
			return
		}
		if c.PlusLength && f.Length == nil {
			v.addf("%s: work count adds the run-time length, but the function has none", where)
			return
		}
		if !v.list(where+": work count inputs", len(c.Inputs)) {
			return
		}
		for _, i := range c.Inputs {
			if uint64(i) >= uint64(len(f.Inputs)) {
				v.addf("%s: work count reads input %d (the function has %d)", where, i, len(f.Inputs))
				return
			}
			if in := &f.Inputs[i]; len(in.Shape) != 0 || (in.DType != I32 && in.DType != U32) {
				v.addf("%s: work count reads input %s (%s%v), not an i32 or u32 scalar", where, in.Name, in.DType, in.Shape)
				return
			}
		}
		cs = []float64{float64(c.Min), float64(c.Max)}
	}
	for _, n := range ns {
		for _, c := range cs {
			if fl, b := w.at(n, c); fl < 0 || b < 0 {
				v.addf("%s: negative work at length %g, count %g (%g FLOPs, %g bytes)", where, n, c, fl, b)
				return
			}
		}
	}
}
