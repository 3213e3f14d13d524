package lower

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// lowerer holds what the functions of one plan share: weights, state, modules, kernel choices.
type lowerer struct {
	m     *ir.Model
	opts  Options
	caps  kernels.Caps
	dev   DeviceModel
	align uint64

	weights      []*weightBuf
	wsize        uint64
	weightByHash map[uint64][]int // quickHash → weight buffers
	weightByID   map[string]int   // fileIdentity → weight buffer
	weightByName map[string]int   // weight tensor name → index in weights
	wtensors     []plan.WeightTensor
	wtensorBuf   []int // weight buffer of each entry of wtensors
	external     *safetensors.File
	extByHash    map[[32]byte]uint64 // content → offset in the external file
	extSize      uint64
	extSum       [32]byte
	extStat      os.FileInfo
	readBuf      []byte
	folded       int
	folds        *FoldCache

	// chunk is the most bytes one device buffer of a region may hold (the device's
	// maxMemoryAllocationSize, aligned down; 0: no limit); wsplit and stateSplit are where the
	// weight and state regions start a new buffer (place.go's fit).
	chunk              uint64
	wsplit, stateSplit plan.Split

	stateIndex map[string]int
	stateOff   []uint64
	stateSize  uint64
	// Sync words (kernels.Launch.Sync): past the state tensors, in the state region, so that
	// they are zeroed when a plan is loaded and by ResetState, and kept between runs.
	syncBase, syncSize uint64

	modules     []plan.Module
	moduleByKey map[string]int

	chosen map[string]*choice // by problem key
	notes  []string
	cands  []plan.Candidate

	// dequant holds the weights the compile-time dequantization fallback made, by source
	// name and storage dtype ("wq@f16"; dequant.go).
	dequant map[string]*dequantWeight

	// wfix are the dispatches' weight bindings, bound at offsets relative to their weight
	// buffer until layoutWeights places it.
	wfix []weightFix
}

type weightBuf struct {
	t      ir.Type
	pieces [][]byte // device bytes (for external weights: compared for deduplication, not written)
	size   uint64
	off    uint64 // in the weight region, once laid out (layoutWeights)
	srcOff uint64 // in the external file
	// view, when not -1, is the weight buffer whose bytes hold this one's at delta (a merged
	// projection's part read by another function): it takes no storage of its own.
	view  int
	delta uint64
}

// choice is a template and configuration for a problem, with its launch.
type choice struct {
	tmpl   *kernels.Template
	cfg    kernels.Config
	launch *kernels.Launch
	est    time.Duration
	err    error
}

func lowerModel(m *ir.Model, fns []*ir.Function, opts Options) (*plan.Plan, *Report, error) {
	if m == nil {
		return nil, nil, fmt.Errorf("lower: no model")
	}
	if len(fns) == 0 {
		fns = m.Functions
	}
	dev := opts.Model
	if dev.Bandwidth == 0 {
		dev = ModelFor(opts.Device)
	}
	if opts.Caps.MaxInvocations > 0 {
		fns = adoptMerges(fns, staticEstimator(opts.Caps, dev))
	}
	l := &lowerer{m: m, opts: opts, caps: opts.Caps, dev: dev,
		weightByHash: map[uint64][]int{}, weightByID: map[string]int{}, weightByName: map[string]int{}, stateIndex: map[string]int{},
		moduleByKey: map[string]int{}, chosen: map[string]*choice{}, folds: opts.Folds}
	if l.folds == nil {
		l.folds = NewFoldCache()
	}
	l.align = uint64(max(l.caps.MinStorageOffsetAlign, 16))
	if l.caps.MaxInvocations == 0 {
		return nil, nil, fmt.Errorf("lower: Options.Caps is empty (fill it from the device, or use kernels.Lavapipe)")
	}
	if opts.ExternalWeights != "" {
		if isGGUF, _ := ir.IsGGUF(opts.ExternalWeights); isGGUF {
			return nil, nil, fmt.Errorf("lower: external weights: %s is a GGUF file; a plan references safetensors files only (compile with inline weights)", opts.ExternalWeights)
		}
		f, err := safetensors.Open(opts.ExternalWeights)
		if err != nil {
			return nil, nil, fmt.Errorf("lower: external weights: %w", err)
		}
		defer f.Close()
		l.external = f
		sum, size, err := fileSum(opts.ExternalWeights)
		if err != nil {
			return nil, nil, fmt.Errorf("lower: external weights: %w", err)
		}
		l.extSum, l.extSize = sum, size
		if st, err := os.Stat(opts.ExternalWeights); err == nil {
			l.extStat = st
		}
	}
	if c := l.caps.MaxAllocation; c > 0 {
		l.chunk = c / l.align * l.align
	}
	// State: every declared tensor, in declaration order, aligned, in as many buffers as the
	// device's allocation limit asks.
	for i, d := range m.State {
		l.stateIndex[d.Name] = i
		off, err := l.fit(alignUp(l.stateSize, l.align), deviceBytes(d.Type), &l.stateSplit)
		if err != nil {
			return nil, nil, fmt.Errorf("lower: state %s: %w", d.Name, err)
		}
		l.stateOff = append(l.stateOff, off)
		l.stateSize = off + deviceBytes(d.Type)
	}
	// The sync words follow, in the last state buffer when it has room for them (a few words
	// per launch that uses them), else in a buffer of their own.
	l.syncBase, _ = l.fit(alignUp(l.stateSize, l.align), syncRoom, &l.stateSplit)
	rep := &Report{}
	var pfns []plan.Function
	var arena uint64
	total := 0
	for _, f := range fns {
		total += len(f.Nodes)
	}
	done := 0
	for _, f := range fns {
		fl := newFnLowerer(l, f)
		pf, fr, err := fl.lower(func(what string) {
			done++
			if opts.Progress != nil {
				opts.Progress(done, total, f.Name+": "+what)
			}
		})
		if err != nil {
			return nil, nil, err
		}
		ranges, notes, err := inputRanges(f)
		if err != nil {
			return nil, nil, fmt.Errorf("lower: %w", err)
		}
		pf.Ranges = ranges
		l.notes = append(l.notes, notes...)
		// Nodes that fold or are dead were not reported one by one; count them done now.
		done = 0
		for _, g := range fns[:len(pfns)+1] {
			done += len(g.Nodes)
		}
		if opts.Progress != nil {
			opts.Progress(done, total, f.Name+": lowered")
		}
		pfns = append(pfns, *pf)
		rep.Functions = append(rep.Functions, *fr)
		arena = max(arena, fr.ArenaBytes)
	}
	p := &plan.Plan{CompilerVersion: opts.CompilerVersion, Model: m.Name, Device: opts.Device,
		Modules: l.modules, Functions: pfns, Arena: plan.Arena{Size: arena, Align: l.align, Split: l.arenaSplit(arena)}}
	if l.syncSize > 0 {
		if l.syncSize > syncRoom {
			return nil, nil, fmt.Errorf("lower: the launches' sync words take %d bytes, more than the %d reserved for them (a bug in lower)", l.syncSize, syncRoom)
		}
		l.stateSize = l.syncBase + l.syncSize
	} else if n := len(l.stateSplit); n > 0 && l.stateSplit[n-1] >= l.stateSize {
		l.stateSplit = l.stateSplit[:n-1] // the buffer reserved for sync words holds none
	}
	if err := l.layoutWeights(); err != nil {
		return nil, nil, err
	}
	p.Weights.Split = l.wsplit
	p.StateSplit = l.stateSplit
	if err := checkDeviceLimits(p, l.wsize, l.stateSize, l.caps); err != nil {
		return nil, nil, err
	}
	if err := l.finishWeights(p); err != nil {
		return nil, nil, err
	}
	for i, d := range m.State {
		dt, err := PlanDType(d.Type.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("lower: state %s: %w", d.Name, err)
		}
		p.State = append(p.State, plan.StateTensor{Name: d.Name, DType: dt, Shape: shape64(d.Type.Shape), Offset: l.stateOff[i]})
	}
	p.StateSize = l.stateSize
	p.Record.Candidates = l.cands
	for _, fr := range rep.Functions {
		l.notes = append(l.notes, fmt.Sprintf("%s: %d dispatches, %d barriers, arena %d bytes for %d bytes of intermediates, estimated %v",
			fr.Name, fr.Dispatches, fr.Barriers, fr.ArenaBytes, fr.Intermediates, fr.Estimated))
	}
	l.notes = append(l.notes, l.dequantNotes()...)
	for _, fr := range rep.Functions {
		n, tol := 0, 0.0
		for _, k := range fr.Kernels {
			if k.Template == kernels.MatmulVecQDot.Name && k.Tolerance > 0 { // others declare theirs for other roundings (matmul_coop's f16)
				n, tol = n+1, max(tol, k.Tolerance)
			}
		}
		if n > 0 {
			l.notes = append(l.notes, fmt.Sprintf(Int8NotePrefix+"%s: %d dispatches quantize their activations to int8 per block of 32 for integer dot products (each within %g of exact arithmetic, row-relative)", fr.Name, n, tol))
		}
	}
	p.Record.Notes = l.notes
	rep.Modules = len(p.Modules)
	rep.Weights = p.Weights.Size
	rep.Folded = l.folded
	rep.State = p.StateSize
	rep.Arena = arena
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("lower: the plan is inconsistent (a bug in lower): %w", err)
	}
	return p, rep, nil
}

func fileSum(path string) ([32]byte, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return [32]byte{}, 0, err
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, uint64(n), nil
}

// ctx is the lowering's context (Options.Context, else one that is never done).
func (l *lowerer) ctx() context.Context {
	if l.opts.Context != nil {
		return l.opts.Context
	}
	return context.Background()
}

// cancelled is the lowering's context error, wrapped to say where it stopped.
func (l *lowerer) cancelled(where string) error {
	if err := l.ctx().Err(); err != nil {
		return fmt.Errorf("lower: %s: %w", where, err)
	}
	return nil
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) / a * a }

// deviceBytes is a tensor's size in device memory: kernels keep bool as u32.
func deviceBytes(t ir.Type) uint64 {
	if t.DType == ir.Bool {
		return 4 * uint64(t.Shape.NumElements())
	}
	return uint64(t.Bytes())
}

// PlanDType is the plan dtype a tensor of ir dtype d has in device memory (bool as u32).
func PlanDType(d ir.DType) (plan.DType, error) {
	switch d {
	case ir.F32:
		return plan.F32, nil
	case ir.F16:
		return plan.F16, nil
	case ir.BF16:
		return plan.BF16, nil
	case ir.I32:
		return plan.I32, nil
	case ir.U32, ir.Bool: // kernels keep bool as u32 (0 or 1)
		return plan.U32, nil
	case ir.Q4_0:
		return plan.Q4_0, nil
	case ir.Q4_1:
		return plan.Q4_1, nil
	case ir.Q5_0:
		return plan.Q5_0, nil
	case ir.Q5_1:
		return plan.Q5_1, nil
	case ir.Q8_0:
		return plan.Q8_0, nil
	case ir.Q4_K:
		return plan.Q4_K, nil
	case ir.Q5_K:
		return plan.Q5_K, nil
	case ir.Q6_K:
		return plan.Q6_K, nil
	case ir.Q8_K:
		return plan.Q8_K, nil
	case ir.Q2_K:
		return plan.Q2_K, nil
	case ir.Q3_K:
		return plan.Q3_K, nil
	case ir.IQ4_NL:
		return plan.IQ4_NL, nil
	case ir.IQ4_XS:
		return plan.IQ4_XS, nil
	case ir.MXFP4:
		return plan.MXFP4, nil
	}
	return plan.InvalidDType, fmt.Errorf("dtype %s has no plan form", d)
}

func shape64(s ir.Shape) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// weight returns the weight buffer holding x under name (deduplicated by content: two tensors
// with the same type and bytes share storage, e.g. zero biases, or a folded constant computed by
// two functions). The buffer keeps x's pieces: the bytes are copied only into the plan file.
func (l *lowerer) weight(name string, x *blob) (int, error) {
	if i, ok := l.weightByName[name]; ok {
		return l.wtensorBuf[i], nil
	}
	x = deviceBlob(x)
	size := uint64(x.size())
	// Bytes that all lie in mapped weight files are told apart by where they lie, not by what
	// they hold: reading every weight to hash it cost a sixth of a SmolLM2 compile, and two
	// equal tensors stored apart in a checkpoint are rare. Other bytes (generated weights,
	// folded values computed in memory) are compared by content.
	id, mapped := l.fileIdentity(x)
	var h uint64
	if !mapped {
		h = l.quickHash(x)
	}
	bi := -1
	if mapped {
		if i, ok := l.weightByID[id]; ok {
			bi = i
		}
	} else {
		for _, i := range l.weightByHash[h] {
			if w := l.weights[i]; w.t.Equal(x.t) && w.size == size && bytes.Equal((&blob{pieces: w.pieces}).bytes(), x.bytes()) {
				bi = i
				break
			}
		}
	}
	if bi < 0 {
		// Offsets are given once every function is lowered (layoutWeights), so that a weight
		// whose bytes are part of another's can be a view of it; the dispatches bind weights at
		// offsets relative to theirs until then.
		if l.chunk > 0 && alignUp(size, l.align) > l.chunk {
			return 0, fmt.Errorf("lower: weight %s is %s (%d bytes), more than one device allocation may hold (maxMemoryAllocationSize %s): %w",
				name, hostmem.Size(size), size, hostmem.Size(l.chunk), ErrDeviceLimit)
		}
		wb := &weightBuf{t: x.t, pieces: x.pieces, size: size, view: -1}
		if l.external != nil {
			off, err := l.findExternal(name, x)
			if err != nil {
				return 0, err
			}
			wb.srcOff = off
		}
		bi = len(l.weights)
		l.weights = append(l.weights, wb)
		if mapped {
			l.weightByID[id] = bi
		} else {
			l.weightByHash[h] = append(l.weightByHash[h], bi)
		}
	}
	dt, err := PlanDType(x.t.DType)
	if err != nil {
		return 0, fmt.Errorf("weight %s: %w", name, err)
	}
	l.weightByName[name] = len(l.wtensors)
	l.wtensors = append(l.wtensors, plan.WeightTensor{Name: name, DType: dt, Shape: shape64(x.t.Shape), Size: size})
	l.wtensorBuf = append(l.wtensorBuf, bi)
	return bi, nil
}

// fileIdentity is where x's bytes lie when every piece lies in a mapped weight file: its type
// and each piece's file and range.
func (l *lowerer) fileIdentity(x *blob) (string, bool) {
	if len(x.pieces) == 0 {
		return "", false
	}
	b := []byte(x.t.String())
	for _, p := range x.pieces {
		f, off, ok := l.m.WeightFile(p)
		if !ok {
			return "", false
		}
		b = append(b, '|')
		b = strconv.AppendUint(b, uint64(uintptr(unsafe.Pointer(f))), 16)
		b = append(b, ':')
		b = strconv.AppendInt(b, off, 10)
		b = append(b, '+')
		b = strconv.AppendInt(b, int64(len(p)), 10)
	}
	return string(b), true
}

// visit calls fn with x's bytes in order. Bytes that lie in a file the model's weights are
// mapped from are read through the file into a buffer instead (ir.Model.WeightFile): hashing
// every weight then does not make the whole mapping resident.
func (l *lowerer) visit(x *blob, fn func([]byte)) {
	if l.readBuf == nil {
		l.readBuf = make([]byte, 1<<20)
	}
	for i := 0; i < len(x.pieces); i++ {
		p := x.pieces[i]
		f, off, ok := l.m.WeightFile(p)
		if !ok {
			fn(p)
			continue
		}
		// Small pieces of one file near each other (a weight's rows reordered for a kernel)
		// are read with one call covering them all.
		lo, hi, j := off, off+int64(len(p)), i+1
		offs := []int64{off}
		for ; j < len(x.pieces); j++ {
			g, o, ok := l.m.WeightFile(x.pieces[j])
			if !ok || g != f || max(hi, o+int64(len(x.pieces[j])))-min(lo, o) > int64(len(l.readBuf)) {
				break
			}
			lo, hi = min(lo, o), max(hi, o+int64(len(x.pieces[j])))
			offs = append(offs, o)
		}
		if j > i+1 {
			span := l.readBuf[:hi-lo]
			if _, err := f.ReadAt(span, lo); err != nil {
				for _, q := range x.pieces[i:j] {
					fn(q) // the mapping has the same bytes; reading it is only slower
				}
			} else {
				for k, o := range offs {
					fn(span[o-lo : o-lo+int64(len(x.pieces[i+k]))])
				}
			}
			i = j - 1
			continue
		}
		for done := 0; done < len(p); {
			n := min(len(l.readBuf), len(p)-done)
			if _, err := f.ReadAt(l.readBuf[:n], off+int64(done)); err != nil {
				fn(p[done:]) // the mapping has the same bytes; reading it is only slower
				break
			}
			fn(l.readBuf[:n])
			done += n
		}
	}
}

// quickHash is a fast hash of x's type and bytes for deduplication (equal contents are then
// compared byte for byte): maphash runs at memory speed, where SHA-256 took a third of a
// second over SmolLM2's weights.
//
// The hash is cached in the fold cache by the identity of x's pieces, so the lowerings of one
// compile (a tuned compile lowers every candidate) hash each weight once.
func (l *lowerer) quickHash(x *blob) uint64 {
	var id strings.Builder
	id.WriteString(x.t.String())
	for _, p := range x.pieces {
		fmt.Fprintf(&id, "|%p+%d", unsafe.SliceData(p), len(p))
	}
	return l.folds.hash(id.String(), x.pieces, func() uint64 {
		var h maphash.Hash
		h.SetSeed(l.folds.seed)
		h.WriteString(x.t.String())
		h.WriteByte('|')
		l.visit(x, func(b []byte) { h.Write(b) })
		return h.Sum64()
	})
}

// findExternal finds the bytes of parameter name in the external safetensors file: the tensor of
// that name, or else the tensor with the same type and bytes (the model may map names). The
// content index is built once, reading each tensor of the file once.
func (l *lowerer) findExternal(name string, x *blob) (uint64, error) {
	f := l.external
	if e, ok := f.Entries[name]; ok && e.Type.Equal(x.t) && e.Size == int64(x.size()) {
		if l.sameFileRange(x, e.Offset) {
			return uint64(e.Offset), nil
		}
		if t, err := f.Read(e.Name); err == nil && bytes.Equal(t.Data, x.bytes()) {
			return uint64(e.Offset), nil
		}
	}
	if l.extByHash == nil {
		l.extByHash = map[[32]byte]uint64{}
		for _, n := range f.Names() {
			t, err := f.Read(n)
			if err != nil {
				return 0, fmt.Errorf("lower: external weights: %w", err)
			}
			h := l.contentHash(blobOf(t))
			if _, dup := l.extByHash[h]; !dup {
				l.extByHash[h] = uint64(f.Entries[n].Offset)
			}
		}
	}
	if off, ok := l.extByHash[l.contentHash(x)]; ok {
		return off, nil
	}
	return 0, fmt.Errorf("lower: external weights %s hold no tensor equal to %s (%s); constants and folded or converted weights cannot be external: compile with inline weights",
		f.Path, name, x.t)
}

// sameFileRange reports whether x is one piece mapped from the external weight file at offset
// off: the parameter was loaded from that very file, so its bytes are the file's.
func (l *lowerer) sameFileRange(x *blob, off int64) bool {
	if len(x.pieces) != 1 || l.extStat == nil {
		return false
	}
	f, at, ok := l.m.WeightFile(x.pieces[0])
	if !ok || at != off {
		return false
	}
	st, err := f.Stat()
	return err == nil && os.SameFile(st, l.extStat)
}

func (l *lowerer) contentHash(x *blob) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s|", x.t)
	l.visit(x, func(b []byte) { h.Write(b) })
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// finishWeights lays out the weight region and fills p.Weights: the tensors' pieces, each read
// from its file when it lies in a mapped weight file (plan.WeightPiece), so that writing the
// plan streams the weights from their source rather than from a copy.
func (l *lowerer) finishWeights(p *plan.Plan) error {
	// Whole words: the last weight's last word may be bound (see ref).
	size := alignUp(l.wsize, 4)
	p.Weights.Size = size
	for i := range l.wtensors {
		w := l.weights[l.wtensorBuf[i]]
		l.wtensors[i].Offset = w.off
		if l.external != nil {
			l.wtensors[i].SourceOffset = w.srcOff
		}
	}
	ts := append([]plan.WeightTensor(nil), l.wtensors...)
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Offset < ts[j].Offset })
	p.Weights.Tensors = ts
	if l.external != nil {
		p.Weights.Source = &plan.Source{Path: l.opts.ExternalWeights, Size: l.extSize, SHA256: l.extSum}
		return nil
	}
	if size == 0 {
		p.Weights.Data = []byte{}
		return nil
	}
	for _, w := range l.weights {
		if err := l.cancelled("placing the weights"); err != nil {
			p.Weights.Pieces = nil
			return err
		}
		if w.view >= 0 {
			continue // its bytes are another weight's
		}
		off := w.off
		for _, pc := range w.pieces {
			wp := plan.WeightPiece{Offset: off, Size: uint64(len(pc)), Data: pc}
			if f, at, ok := l.m.WeightFile(pc); ok {
				wp.Data, wp.File, wp.FileOffset = nil, f, at
			}
			p.Weights.Pieces = append(p.Weights.Pieces, wp)
			off += uint64(len(pc))
		}
	}
	if p.Weights.Pieces == nil {
		if err := hostmem.Check(fmt.Sprintf("lower: the plan's weight region (%d tensors)", len(l.weights)), size); err != nil {
			return err
		}
		p.Weights.Data = make([]byte, size) // weights of zero bytes only
	}
	return nil
}

// choose returns the template, configuration and launch for p (cached by problem key).
func (l *lowerer) choose(p *kernels.Problem) *choice {
	key := p.Key()
	if c, ok := l.chosen[key]; ok {
		return c
	}
	c := &choice{}
	l.chosen[key] = c
	if l.opts.Choose != nil {
		t, cfg, err := l.opts.Choose(p)
		if err != nil {
			c.err = err
			return c
		}
		if err := t.Space.Valid(p, cfg, l.caps); err != nil {
			c.err = fmt.Errorf("template %s at %s: %w", t.Name, cfg.Key(), err)
			return c
		}
		ln, err := t.Build(p, cfg, l.caps)
		if err != nil {
			c.err = fmt.Errorf("template %s at %s: %w", t.Name, cfg.Key(), err)
			return c
		}
		c.tmpl, c.cfg, c.launch, c.est = t, cfg, ln, Estimate(ln, l.dev)
		return c
	}
	c.tmpl, c.cfg, c.launch, c.est, c.err = staticChoice(p, l.caps, l.dev)
	return c
}

// StaticChoice is lowering's choice for a problem without measurement: among the templates that
// accept it, the one whose default configuration has the lowest roofline estimate on dev (ties
// broken as better says). The measured tuner uses it as its baseline (tune.Tuner.Static), so
// "static" means the same kernel there as in a --no-tune plan.
func StaticChoice(p *kernels.Problem, caps kernels.Caps, dev DeviceModel) (*kernels.Template, kernels.Config, error) {
	t, cfg, _, _, err := staticChoice(p, caps, dev)
	return t, cfg, err
}

// StaticLaunch is StaticChoice with the launch it built and its roofline estimate, for a caller
// that estimates the choice (building it again costs what choosing did).
func StaticLaunch(p *kernels.Problem, caps kernels.Caps, dev DeviceModel) (*kernels.Template, kernels.Config, *kernels.Launch, time.Duration, error) {
	return staticChoice(p, caps, dev)
}

func staticChoice(p *kernels.Problem, caps kernels.Caps, dev DeviceModel) (*kernels.Template, kernels.Config, *kernels.Launch, time.Duration, error) {
	ts, err := kernels.For(p, caps)
	if err != nil {
		return nil, nil, nil, 0, &NoTemplateError{Op: p.OpName(), Err: err}
	}
	var (
		bt   *kernels.Template
		bc   kernels.Config
		bl   *kernels.Launch
		be   time.Duration
		errs []string
	)
	for _, t := range ts {
		ln, cfg, err := kernels.Build(t, p, caps)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		est := Estimate(ln, dev)
		if bl == nil || better(est, ln, be, bl, caps.CPU) {
			bt, bc, bl, be = t, cfg, ln, est
		}
	}
	if bl == nil {
		return nil, nil, nil, 0, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return bt, bc, bl, be, nil
}

// better reports whether a launch estimated at est beats the current choice. Estimates within 1%
// are a tie (the roofline sees the same bytes and flops, e.g. a tiled matmul and a matrix-vector
// kernel on one row), broken on a GPU in favour of more invocations in flight, which hide memory
// latency better, and on a CPU device (cpu: lavapipe) in favour of fewer, which there are work a
// thread does in turn (a 64-row tile on one row computes 64 rows, a workgroup costs its
// scheduling); a remaining tie keeps the earlier template by name. A heuristic for the static
// path only: the measured tuner decides for real.
func better(est time.Duration, ln *kernels.Launch, cur time.Duration, curL *kernels.Launch, cpu bool) bool {
	lo, hi := min(est, cur), max(est, cur)
	if float64(hi-lo) > 0.01*float64(hi) {
		return est < cur
	}
	if cpu {
		return invocations(ln) < invocations(curL)
	}
	return invocations(ln) > invocations(curL)
}

// invocations is the number of invocations that do the launch's work: its Occupancy where it
// says, else the largest number one step starts.
func invocations(l *kernels.Launch) float64 {
	if l.Occupancy > 0 {
		return l.Occupancy
	}
	most := 0.0
	for _, st := range l.Steps {
		most = max(most, st.Invocations())
	}
	return most
}

// module returns the plan module index of a step, deduplicating identical SPIR-V with identical
// specialization constants.
func (l *lowerer) module(st *kernels.Step, key string, cfg kernels.Config) int {
	k := st.Kernel
	var b strings.Builder
	h := sha256.Sum256(k.Bytes())
	b.Write(h[:])
	for i, v := range st.Spec {
		fmt.Fprintf(&b, "|%d=%d", i, v)
	}
	fmt.Fprintf(&b, "|push%d", k.PushSize)
	dk := b.String()
	if i, ok := l.moduleByKey[dk]; ok {
		return i
	}
	m := plan.Module{Key: key, Config: map[string]int64{}, SPIRV: append([]uint32(nil), k.Words...), Entry: "main",
		PushConstantSize: uint32(k.PushSize), Workgroup: k.WorkgroupSizeFor(st.Spec)}
	for n, v := range cfg {
		m.Config[n] = int64(v)
	}
	for bi, kb := range k.Bindings {
		acc := plan.ReadWrite
		switch kb.Access {
		case codegen.ReadOnly:
			acc = plan.Read
		case codegen.WriteOnly:
			acc = plan.Write
		}
		m.Bindings = append(m.Bindings, plan.BindingDecl{Binding: uint32(bi), Access: acc})
	}
	for i, v := range st.Spec {
		m.SpecConstants = append(m.SpecConstants, plan.SpecConstant{ID: uint32(i), Value: v})
	}
	l.moduleByKey[dk] = len(l.modules)
	l.modules = append(l.modules, m)
	return len(l.modules) - 1
}
