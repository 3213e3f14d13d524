package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vkc-project/vkc/internal/hostmem"
	"github.com/vkc-project/vkc/internal/par"
	"github.com/vkc-project/vkc/plan"
)

// This file executes compiled plans: Device.Load turns a plan.Plan into an Executable (pipelines
// created once per distinct module, weights uploaded, state zeroed, every function recorded once
// as a Program), and Executable.Run writes inputs, submits and reads outputs.

// LoadOptions configure Device.Load.
type LoadOptions struct {
	// AllowForeign loads a plan compiled for another device (its tuning may not suit this one,
	// and a kernel may need a capability this device lacks).
	AllowForeign bool
	// PlanPath is the plan file's path, for resolving external weights relative to it; "" is the
	// working directory.
	PlanPath string
	// FullGrids issues every dispatch of a function with a run-time length at its largest grid
	// (the kernels still read n, so results are the same): the baseline that shows what the
	// grids that follow n save. For benchmarks.
	FullGrids bool
	// Pipelines, when set, gives the pipeline of each distinct kernel instead of Load creating
	// it: pipelines shared with other loads (a compile's measured selection shares them between
	// its candidates and with tuning, so a kernel is compiled once). The executable does not
	// destroy them; they must outlive it.
	Pipelines func(k Kernel) (*Pipeline, error)
	// Weights, when set, shares the weight region with the other loads through it of plans
	// that hold the same weights (WeightShare): a measured selection's candidates upload them
	// once. The executable does not free a shared region; the share must outlive it.
	Weights *WeightShare
	// Progress, when set, hears how many of the plan's weight bytes are on the device so far,
	// as Load uploads them (in runs of weightRun; once at the end for external weights).
	Progress func(done, total uint64)
	// OutputsOnDevice keeps the outputs bounded by a run-time length in device memory, copied to
	// the host after each run (all their rows), rather than written by the kernels into
	// host-visible memory (the rows a run produces). Measure then times the kernels without their
	// writes across the bus: the scoring function of SmolLM2 writes 512×49152 f32 logits, 100 MB a
	// run, and a measured selection times its candidates' kernels, the same output for all.
	OutputsOnDevice bool
}

// weightRun is the run of a plan's weights that Load assembles and uploads at a time: 128 MiB,
// four halves of the staging buffer, so that a staged upload overlaps the host's copies with
// the device's (uploadStaged) over most of a run.
const weightRun = 128 << 20

// Executable is a plan loaded on a device. Runs of its functions share the weights, the state
// and the arena, so an Executable runs one function at a time (its methods serialise).
type Executable struct {
	d    *Device
	plan *plan.Plan

	weights, state, arena regionBuffers
	sharedWeights         bool        // the weights are a WeightShare's (LoadOptions.Weights): Close leaves them
	pipes                 []*Pipeline // by plan module index (deduplicated modules share one)
	ownPipes              []*Pipeline
	fns                   map[string]*execFunction
	names                 []string // function names in plan order

	mu     sync.Mutex // one run at a time: runs share the arena, the state and the argument slices
	closed bool
	// prepared holds the pipelines Prepare has made ready.
	prepared map[*Pipeline]bool

	fullGrids       bool
	outputsOnDevice bool

	// counting: each run adds its device time to deviceTime (CountDeviceTime).
	counting   bool
	deviceTime time.Duration

	// loadPhases is where Load's time went (LoadPhases).
	loadPhases []LoadPhase
}

// LoadPhase is one step of Device.Load and its wall time.
type LoadPhase struct {
	Step string
	Time time.Duration
}

// LoadPhases says where Load's time went: the checks of the plan and its modules, the
// allocation of the state and the arena, the weights, the state's zeros, the pipelines, and the
// functions' programs (buffers, descriptor sets, recorded commands). A measured selection's trace
// prints them for each candidate it loads.
func (e *Executable) LoadPhases() []LoadPhase { return e.loadPhases }

type execFunction struct {
	f       *plan.Function
	prog    *Program
	buffers []*Buffer // staging-slot buffers of inputs and outputs
	check   *inputChecker
	insz    []int
	outsz   []int
	in, out [][]byte // reused argument slices
	// outScratch receives the outputs of every run (allocated once at load); RunInto copies
	// them to the caller's slices.
	outScratch [][]byte
	// scalars lists the dispatches whose push constants take run-time scalar inputs.
	scalars []scalarPatch

	// A function with a run-time length: n of the last bind; length is the block the runtime
	// writes before each run (n as an i32 at byte 0, then the group counts of each scaled
	// dispatch), the program's last input; scaled lists those dispatches.
	n      uint32
	length []byte
	scaled []scaledDispatch
	// outRow[i] is the bytes of one unit of the length of bounded output i (0 for the others).
	outRow []int
	// variants are the function's variants for smaller capacities (plan.Function.Variants).
	variants []*execFunction
}

// scaledDispatch is a dispatch whose grid follows the run-time length: its group counts are at
// byte off of the length block.
type scaledDispatch struct {
	off   int
	grid  [3]uint32
	scale *plan.GridScale
}

// lengthHeader is the bytes before the first group counts in the length block: n, padded to
// 16 bytes.
const lengthHeader = 16

// indirectGrids says whether scaled dispatches are issued with indirect group counts; false runs
// every grid at its largest, for benchmarks that price the indirect dispatch (see
// LoadOptions.FullGrids).
func (e *Executable) indirectGrids() bool { return !e.fullGrids }

type scalarPatch struct {
	dispatch int
	slot     plan.ScalarSlot
}

// DeviceFingerprint converts the device's fingerprint to the plan's form.
func (d *Device) DeviceFingerprint() plan.Fingerprint {
	f := d.Info.Fingerprint
	return plan.Fingerprint{VendorID: f.VendorID, DeviceID: f.DeviceID, DriverVersion: f.DriverVersion,
		PipelineCacheUUID: f.PipelineCacheUUID, DeviceName: d.Info.Name}
}

// Load prepares p for execution on d: it checks that p was compiled for this device (unless
// opts.AllowForeign), validates it, creates one pipeline per distinct module, uploads the
// weights, zeroes the state and records each function once. Nothing is left allocated on error.
//
//	p, _ := plan.ReadFile("tinyllama.plan")
//	exe, err := dev.Load(p, runtime.LoadOptions{PlanPath: "tinyllama.plan"})
//	if err != nil { ... }                // names both devices when the plan is for another one
//	defer exe.Close()
//	out, err := exe.Run(ctx, "decode", map[string][]byte{"tokens": tok, "pos": pos})
//	logits := out["logits"]              // little-endian f32, as the plan's Value says
func (d *Device) Load(p *plan.Plan, opts LoadOptions) (_ *Executable, err error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	if err := p.CheckDevice(d.DeviceFingerprint()); err != nil && !opts.AllowForeign {
		return nil, fmt.Errorf("load plan of %s: %w (LoadOptions.AllowForeign overrides)", p.Model, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("load plan of %s: %w", p.Model, err)
	}
	// Every module passes the loader's structural checks before anything reaches the driver.
	for i := range p.Modules {
		m := &p.Modules[i]
		if err := checkModule(m.SPIRV, m.Entry, &d.Info); err != nil {
			return nil, fmt.Errorf("load plan of %s: module %d (%s): %w", p.Model, i, m.Key, err)
		}
	}
	e := &Executable{d: d, plan: p, fns: map[string]*execFunction{}, fullGrids: opts.FullGrids, outputsOnDevice: opts.OutputsOnDevice}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	t0 := time.Now()
	phase := func(step string) {
		e.loadPhases = append(e.loadPhases, LoadPhase{step, time.Since(t0)})
		t0 = time.Now()
	}
	phase("checks")
	// Everything the plan needs in device memory is compared with what the heap has free
	// before anything is allocated: a plan too large is refused with the numbers and what would
	// fit, not by an allocation failing half-way.
	if err := CheckFits(p, d.Room()); err != nil {
		return nil, fmt.Errorf("load plan of %s on %s: %w", p.Model, d.Info.Name, err)
	}
	// Host copies the executable keeps: every function's output scratch. A plan's sizes come
	// from a file: check them before allocating.
	var host uint64
	for _, f := range p.Functions {
		for i := range f.Outputs {
			n, _ := f.Outputs[i].Bytes()
			host += n
		}
	}
	if err := hostmem.Check(fmt.Sprintf("load plan of %s: the outputs' buffers", p.Model), host); err != nil {
		return nil, err
	}
	for _, r := range []struct {
		what  string
		rb    *regionBuffers
		size  uint64
		split plan.Split
	}{{"state", &e.state, p.StateSize, p.StateSplit}, {"arena", &e.arena, p.Arena.Size, p.Arena.Split}} {
		if err := r.rb.alloc(d, r.size, r.split); err != nil {
			return nil, fmt.Errorf("load plan of %s: %s: %w", p.Model, r.what, err)
		}
	}
	if a := p.Arena.Align; a > 1 {
		for _, b := range e.arena.bufs {
			if b.off%a != 0 {
				return nil, fmt.Errorf("load plan of %s: the arena's base is not aligned to %d bytes", p.Model, a)
			}
		}
	}
	phase("state and arena")
	upload := func(rb *regionBuffers) error {
		if err := rb.alloc(d, p.Weights.Size, p.Weights.Split); err != nil {
			return fmt.Errorf("load plan of %s: weights: %w", p.Model, err)
		}
		if p.Weights.Source != nil {
			w, err := p.LoadWeights(opts.PlanPath)
			if err != nil {
				return fmt.Errorf("load plan of %s: %w", p.Model, err)
			}
			if err := rb.upload(d, 0, w); err != nil {
				return fmt.Errorf("load plan of %s: upload weights: %w", p.Model, err)
			}
			if opts.Progress != nil {
				opts.Progress(uint64(len(w)), uint64(len(w)))
			}
		} else if err := p.Weights.Spans(weightRun, func(off uint64, b []byte) error {
			// A plan fresh from the compiler holds its weights in pieces (plan.Weights.Pieces):
			// they are uploaded from where they are in runs of weightRun, not assembled first.
			if err := rb.upload(d, off, b); err != nil {
				return err
			}
			if opts.Progress != nil {
				opts.Progress(off+uint64(len(b)), p.Weights.Size)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("load plan of %s: upload weights: %w", p.Model, err)
		}
		return nil
	}
	if opts.Weights != nil {
		if err := opts.Weights.weights(d, e, p, upload); err != nil {
			return nil, err
		}
	} else if err := upload(&e.weights); err != nil {
		return nil, err
	}
	phase("weights")
	if err := e.resetState(); err != nil {
		return nil, err
	}
	phase("zeros")

	// Pipelines: one per distinct SPIR-V and specialization (the compiler dedupes, but a plan
	// from elsewhere may not), created in parallel: a driver compiles a pipeline in the calling
	// thread, and NVIDIA's takes up to a second for a cooperative-matrix matmul.
	first := map[string]int{} // module key → the first module with it
	var distinct []int
	kernels := make([]Kernel, len(p.Modules))
	for i := range p.Modules {
		m := &p.Modules[i]
		key := moduleKey(m)
		if _, ok := first[key]; ok {
			continue
		}
		first[key] = i
		distinct = append(distinct, i)
		k := Kernel{Name: m.Key, SPIRV: wordsToBytes(m.SPIRV), Entry: m.Entry, PushConstantSize: int(m.PushConstantSize)}
		for _, b := range m.Bindings {
			k.Bindings = max(k.Bindings, int(b.Binding)+1)
		}
		if k.Bindings != len(m.Bindings) {
			return nil, fmt.Errorf("load plan of %s: module %d (%s): bindings are not numbered 0..%d", p.Model, i, m.Key, len(m.Bindings)-1)
		}
		for _, s := range m.SpecConstants {
			k.Spec = append(k.Spec, SpecConstant{ID: s.ID, Value: s.Value})
		}
		kernels[i] = k
	}
	type made struct {
		pl  *Pipeline
		err error
	}
	pipes := make([]*Pipeline, len(p.Modules))
	errs := make([]error, len(p.Modules))
	newPipeline := d.NewPipeline
	if opts.Pipelines != nil {
		newPipeline = opts.Pipelines
	}
	for k, r := range par.Map(distinct, func(i int) made { pl, err := newPipeline(kernels[i]); return made{pl, err} }) {
		pipes[distinct[k]], errs[distinct[k]] = r.pl, r.err
	}
	for _, i := range distinct {
		if pipes[i] != nil && opts.Pipelines == nil {
			e.ownPipes = append(e.ownPipes, pipes[i])
		}
	}
	for _, i := range distinct {
		if errs[i] != nil {
			return nil, fmt.Errorf("load plan of %s: module %d (%s): %w", p.Model, i, p.Modules[i].Key, errs[i])
		}
	}
	for i := range p.Modules {
		e.pipes = append(e.pipes, pipes[first[moduleKey(&p.Modules[i])]])
	}
	phase("pipelines")

	for i := range p.Functions {
		f := &p.Functions[i]
		ef, err := e.loadFunction(f)
		if err != nil {
			return nil, fmt.Errorf("load plan of %s: function %s: %w", p.Model, f.Name, err)
		}
		e.fns[f.Name] = ef
		e.names = append(e.names, f.Name)
		for j := range f.Variants {
			g := &f.Variants[j]
			vf, err := e.loadFunction(g)
			if err != nil {
				return nil, fmt.Errorf("load plan of %s: function %s: variant for %s in %d..%d: %w", p.Model, f.Name, g.Length.Name, g.Length.Min, g.Length.Max, err)
			}
			ef.variants = append(ef.variants, vf)
		}
	}
	phase("functions")
	return e, nil
}

func moduleKey(m *plan.Module) string {
	var b strings.Builder
	b.Grow(4*len(m.SPIRV) + 8*len(m.SpecConstants) + len(m.Entry) + 8)
	b.Write(wordsToBytes(m.SPIRV))
	fmt.Fprintf(&b, "|%s|%d|", m.Entry, m.PushConstantSize)
	specs := append([]plan.SpecConstant(nil), m.SpecConstants...)
	sort.Slice(specs, func(i, j int) bool { return specs[i].ID < specs[j].ID })
	for _, s := range specs {
		fmt.Fprintf(&b, "%d=%d,", s.ID, s.Value)
	}
	return b.String()
}

func wordsToBytes(w []uint32) []byte {
	out := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(out[4*i:], v)
	}
	return out
}

func (e *Executable) loadFunction(f *plan.Function) (_ *execFunction, err error) {
	d := e.d
	check, err := newInputChecker(f)
	if err != nil {
		return nil, err
	}
	ef := &execFunction{f: f, check: check}
	defer func() {
		if err != nil {
			for _, b := range ef.buffers {
				b.Free()
			}
		}
	}()
	slot := func(kind string, i int, v *plan.Value) (*Buffer, Region, int, error) {
		n, err := v.Bytes()
		if err != nil {
			return nil, Region{}, 0, fmt.Errorf("%s %s: %w", kind, v.Name, err)
		}
		if v.Place == plan.InArena {
			b, at := e.arena.at(v.Offset)
			return nil, Region{Buffer: b, Offset: int64(at), Size: int64(n)}, int(n), nil
		}
		alloc := d.NewBuffer
		if kind == "output" && v.Bounded && !e.outputsOnDevice {
			// A bounded output is written straight into host-visible memory: a recorded copy
			// would move all Max rows whatever n is, and only n of them are read back.
			alloc = d.NewStagingBuffer
		}
		b, err := alloc(int64(max(n, 16)))
		if err != nil {
			return nil, Region{}, 0, fmt.Errorf("%s %s: %w", kind, v.Name, err)
		}
		ef.buffers = append(ef.buffers, b)
		return b, Region{Buffer: b, Size: int64(n)}, int(n), nil
	}
	var spec ProgramSpec
	inBuf := make([]*Buffer, len(f.Inputs))
	outBuf := make([]*Buffer, len(f.Outputs))
	max32 := uint32(0)
	if f.Length != nil {
		max32 = f.Length.Max
	}
	for i := range f.Inputs {
		b, r, n, err := slot("input", i, &f.Inputs[i])
		if err != nil {
			return nil, err
		}
		inBuf[i] = b
		spec.Inputs = append(spec.Inputs, r)
		ef.insz = append(ef.insz, n)
	}
	for i := range f.Outputs {
		b, r, n, err := slot("output", i, &f.Outputs[i])
		if err != nil {
			return nil, err
		}
		outBuf[i] = b
		spec.Outputs = append(spec.Outputs, r)
		ef.outsz = append(ef.outsz, n)
		rb := 0
		if f.Outputs[i].Bounded {
			rb = n / int(max32)
		}
		ef.outRow = append(ef.outRow, rb)
	}
	// The length block: n and the group counts of the dispatches whose grids follow it.
	var lenBuf *Buffer
	if f.Length != nil {
		size := lengthHeader
		for j := range f.Dispatches {
			if f.Dispatches[j].Scale != nil && e.indirectGrids() {
				ef.scaled = append(ef.scaled, scaledDispatch{off: size, grid: f.Dispatches[j].Grid, scale: f.Dispatches[j].Scale})
				size += 12
			}
		}
		if lenBuf, err = d.NewBuffer(int64(size)); err != nil {
			return nil, fmt.Errorf("length block: %w", err)
		}
		ef.buffers = append(ef.buffers, lenBuf)
		ef.length = make([]byte, size)
		spec.Inputs = append(spec.Inputs, Region{Buffer: lenBuf, Size: int64(size)})
	}
	scaled := 0
	for j := range f.Dispatches {
		pd := &f.Dispatches[j]
		m := &e.plan.Modules[pd.Module]
		acc := map[uint32]plan.Access{}
		for _, b := range m.Bindings {
			acc[b.Binding] = b.Access
		}
		binds := make([]Binding, len(m.Bindings))
		for _, b := range pd.Bindings {
			var buf *Buffer
			at := b.Buffer.Offset
			switch b.Buffer.Region.Kind {
			case plan.RegionWeights:
				buf, at = e.weights.at(at)
			case plan.RegionState:
				buf, at = e.state.at(at)
			case plan.RegionArena:
				buf, at = e.arena.at(at)
			case plan.RegionInput:
				buf = inBuf[b.Buffer.Region.Index]
			case plan.RegionOutput:
				buf = outBuf[b.Buffer.Region.Index]
			case plan.RegionLength:
				buf = lenBuf
			}
			binds[b.Binding] = Binding{Buffer: buf, Offset: int64(at), Size: int64(b.Buffer.Range), Access: Access(acc[b.Binding])}
		}
		name := pd.Label
		if name == "" {
			name = m.Key
		}
		ds := Dispatch{Name: name, Pipeline: e.pipes[pd.Module], Bindings: binds,
			Push: append([]byte(nil), pd.Push...), Grid: pd.Grid}
		if pd.Scale != nil && e.indirectGrids() {
			ds.Indirect, ds.IndirectOffset = lenBuf, int64(ef.scaled[scaled].off)
			scaled++
		}
		spec.Dispatches = append(spec.Dispatches, ds)
		for _, s := range pd.Scalars {
			ef.scalars = append(ef.scalars, scalarPatch{j, s})
		}
	}
	// The plan's order is the compiler's; the runtime's hazard analysis puts barriers where the
	// plan has them (or fewer, never more: Validate proved the plan's intervals hazard-free).
	spec.KeepOrder = true
	prog, err := d.NewProgram(spec)
	if err != nil {
		return nil, err
	}
	ef.prog = prog
	ef.in = make([][]byte, len(spec.Inputs))
	ef.out = make([][]byte, len(f.Outputs))
	for _, n := range ef.outsz {
		ef.outScratch = append(ef.outScratch, make([]byte, n))
	}
	return ef, nil
}

// ErrUnknownFunction is wrapped by errors for a function name the plan does not have.
var ErrUnknownFunction = errors.New("no such function")

func (e *Executable) function(fn string) (*execFunction, error) {
	if e.closed {
		return nil, ErrClosed
	}
	ef, ok := e.fns[fn]
	if !ok {
		return nil, fmt.Errorf("function %q: %w (the plan has %s)", fn, ErrUnknownFunction, strings.Join(e.names, ", "))
	}
	return ef, nil
}

// bind checks inputs against the function's signature and its input ranges and fills ef.in,
// then writes the run-time scalars into the push constants; it allocates nothing. For a
// function with a run-time length the checker derives n from the bounded inputs (k·n rows
// each) and bind writes the length block.
func (ef *execFunction) bind(inputs map[string][]byte) error {
	f := ef.f
	if err := ef.check.bind(inputs, ef.in); err != nil {
		return err
	}
	if f.Length != nil {
		n := ef.check.n
		ef.n = uint32(n)
		binary.LittleEndian.PutUint32(ef.length, uint32(n))
		for _, s := range ef.scaled {
			g := s.scale.Groups(s.grid, uint32(n))
			for a := 0; a < 3; a++ {
				binary.LittleEndian.PutUint32(ef.length[s.off+4*a:], g[a])
			}
		}
		ef.in[len(ef.in)-1] = ef.length
	}
	for _, s := range ef.scalars {
		v := binary.LittleEndian.Uint32(ef.in[s.slot.Input]) + uint32(s.slot.Add)
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], v)
		if err := ef.prog.SetPush(s.dispatch, int(s.slot.Offset), w[:]); err != nil {
			return err
		}
	}
	return nil
}

// bindVariant binds inputs (bind) and returns the function that runs them: the variant whose
// lengths hold the run's n (bound too), else ef.
func (ef *execFunction) bindVariant(inputs map[string][]byte) (*execFunction, error) {
	if err := ef.bind(inputs); err != nil {
		return nil, err
	}
	for _, v := range ef.variants {
		if l := v.f.Length; ef.n >= l.Min && ef.n <= l.Max {
			if err := v.bind(inputs); err != nil {
				return nil, err
			}
			return v, nil
		}
	}
	return ef, nil
}

// outBytes is the size of output i in a run at the last bound length.
func (ef *execFunction) outBytes(i int) int {
	if rb := ef.outRow[i]; rb > 0 {
		return rb * int(ef.n)
	}
	return ef.outsz[i]
}

func signature(vs []plan.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%s %s%v", v.Name, v.DType, v.Shape)
	}
	return strings.Join(parts, ", ")
}

// Run executes function fn with the given inputs (raw little-endian bytes by input name; every
// input exactly once, with exactly its size) and returns the outputs by name. Inputs are checked
// before anything is submitted; an error names the input. The state persists between runs. Run
// allocates only the returned output slices; RunInto allocates nothing.
//
// A function with a run-time length (plan.Function.Length) takes its bounded inputs with k·n
// rows for any n in the length's range (tokens: n i32 values) and returns its bounded outputs
// with k·n rows; the other inputs and outputs keep their sizes.
func (e *Executable) Run(ctx context.Context, fn string, inputs map[string][]byte) (map[string][]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ef, err := e.function(fn)
	if err != nil {
		return nil, err
	}
	if ef, err = ef.bindVariant(inputs); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(ef.f.Outputs))
	for i := range ef.f.Outputs {
		b := make([]byte, ef.outBytes(i))
		out[ef.f.Outputs[i].Name] = b
		ef.out[i] = b
	}
	if err := e.execute(ctx, ef); err != nil {
		return nil, err
	}
	return out, nil
}

// RunInto is Run writing the outputs into caller-provided slices (by output name, each exactly the
// output's size — for a bounded output, its k·n rows; outputs not in the map are not read back).
func (e *Executable) RunInto(ctx context.Context, fn string, inputs, outputs map[string][]byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.runInto(ctx, fn, inputs, outputs)
	return err
}

// runInto runs fn and returns the function (or variant) that ran.
func (e *Executable) runInto(ctx context.Context, fn string, inputs, outputs map[string][]byte) (*execFunction, error) {
	ef, err := e.function(fn)
	if err != nil {
		return nil, err
	}
	if ef, err = ef.bindVariant(inputs); err != nil {
		return nil, err
	}
	for i := range ef.f.Outputs {
		o := &ef.f.Outputs[i]
		b, ok := outputs[o.Name]
		if !ok {
			b = nil
		} else if len(b) != ef.outBytes(i) {
			if ef.outRow[i] > 0 {
				return nil, fmt.Errorf("function %s: output %q buffer has %d bytes, want %d (%d rows of %d bytes for %s=%d)",
					fn, o.Name, len(b), ef.outBytes(i), ef.n, ef.outRow[i], ef.f.Length.Name, ef.n)
			}
			return nil, fmt.Errorf("function %s: output %q buffer has %d bytes, want %d", fn, o.Name, len(b), ef.outsz[i])
		}
		ef.out[i] = b
	}
	for name := range outputs {
		found := false
		for i := range ef.f.Outputs {
			found = found || ef.f.Outputs[i].Name == name
		}
		if !found {
			return nil, fmt.Errorf("function %s: unknown output %q (outputs: %s)", fn, name, signature(ef.f.Outputs))
		}
	}
	return ef, e.execute(ctx, ef)
}

// execute runs ef with the inputs bind set and copies the outputs into ef.out (nil: not read).
func (e *Executable) execute(ctx context.Context, ef *execFunction) error {
	for i := range ef.outScratch {
		// Only the outputs asked for are read back, and of a bounded one only the rows a run
		// at this length produces.
		n := ef.outBytes(i)
		if ef.out[i] == nil {
			n = 0
		}
		ef.outScratch[i] = ef.outScratch[i][:n:cap(ef.outScratch[i])]
	}
	if err := ef.prog.Run(ctx, ef.in, ef.outScratch); err != nil {
		return fmt.Errorf("function %s: %w", ef.f.Name, err)
	}
	if e.counting {
		t, err := ef.prog.LastGPUTime()
		if err != nil {
			return fmt.Errorf("function %s: device time: %w", ef.f.Name, err)
		}
		e.deviceTime += t
	}
	for i, b := range ef.out {
		copy(b, ef.outScratch[i])
	}
	return nil
}

// CountDeviceTime starts counting the device time of the runs from zero: from now on each Run
// and RunInto adds the time from its first to its last command on the device (its
// timestamps, the copies of inputs and outputs included; nothing on a device without
// timestamps), which DeviceTime returns. The wall time of a run less its device time is what
// the host and the submission cost: vkc bench --tg reports both. Counting reads a query pool
// after each run.
func (e *Executable) CountDeviceTime() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counting, e.deviceTime = true, 0
}

// DeviceTime is the device time of the runs since CountDeviceTime (0 before it, and on a device
// without timestamps).
func (e *Executable) DeviceTime() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deviceTime
}

// ResetState zeroes every state tensor (as at load).
func (e *Executable) ResetState() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resetState()
}

func (e *Executable) resetState() error {
	if e.closed {
		return ErrClosed
	}
	if err := e.state.zero(e.d); err != nil {
		return fmt.Errorf("reset state: %w", err)
	}
	return nil
}

// ReadState returns the current bytes of the named state tensor.
func (e *Executable) ReadState(name string) ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	for _, s := range e.plan.State {
		if s.Name != name {
			continue
		}
		n, err := s.DType.Bytes(s.Shape)
		if err != nil {
			return nil, err
		}
		out := make([]byte, n)
		b, at := e.state.at(s.Offset)
		if err := e.d.Download(b, int64(at), out); err != nil {
			return nil, fmt.Errorf("read state %s: %w", name, err)
		}
		return out, nil
	}
	names := make([]string, len(e.plan.State))
	for i, s := range e.plan.State {
		names[i] = s.Name
	}
	return nil, fmt.Errorf("no state tensor %q (the plan has %s)", name, strings.Join(names, ", "))
}

// RunsAt returns the plan function that runs fn at run-time length n: the variant whose lengths
// hold n (plan.Function.Variants), else fn itself (also for a function without a length).
// Profile's dispatch indices and the dispatches' work refer to it.
func (e *Executable) RunsAt(fn string, n int) (*plan.Function, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ef, err := e.function(fn)
	if err != nil {
		return nil, err
	}
	for _, v := range ef.variants {
		if l := v.f.Length; n >= int(l.Min) && n <= int(l.Max) {
			return v.f, nil
		}
	}
	return ef.f, nil
}

// Functions lists the plan's functions with their signatures and dispatch lists.
func (e *Executable) Functions() []plan.Function {
	return append([]plan.Function(nil), e.plan.Functions...)
}

// Device is the device the executable runs on.
func (e *Executable) Device() *Device { return e.d }

// Plan is the loaded plan.
func (e *Executable) Plan() *plan.Plan { return e.plan }

// Stats reports the dispatch and barrier counts the runtime recorded for fn.
func (e *Executable) Stats(fn string) (Stats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ef, err := e.function(fn)
	if err != nil {
		return Stats{}, err
	}
	return ef.prog.Stats(), nil
}

// Profile runs fn once with inputs (updating the state as a Run does), then runs its dispatches
// again serialised with a timestamp after each, and returns every dispatch's GPU time (in
// recorded order; Index is the plan's dispatch index) with the function's Stats. The profiling run
// sees the state the first run left, so a decode step is profiled at the next position.
func (e *Executable) Profile(ctx context.Context, fn string, inputs map[string][]byte) ([]DispatchTime, Stats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ef, err := e.runInto(ctx, fn, inputs, nil)
	if err != nil {
		return nil, Stats{}, err
	}
	times, _, err := ef.prog.Profile(ctx)
	if err != nil {
		return nil, Stats{}, err
	}
	return times, ef.prog.Stats(), nil
}

// Measure runs fn once with inputs (writing them into place) and then times repetitions of its
// dispatches (see Program.Measure). The state keeps changing between repetitions, as it would in
// a decode loop at a fixed position.
func (e *Executable) Measure(ctx context.Context, fn string, inputs map[string][]byte, o MeasureOptions) (Measurement, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ef, err := e.runInto(ctx, fn, inputs, nil)
	if err != nil {
		return Measurement{}, err
	}
	return ef.prog.Measure(ctx, o)
}

// Close frees the executable's programs, pipelines and buffers. It is safe to call twice.
func (e *Executable) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for _, name := range e.names {
		ef := e.fns[name]
		for _, x := range append([]*execFunction{ef}, ef.variants...) {
			x.prog.Close()
			for _, b := range x.buffers {
				b.Free()
			}
		}
	}
	for _, pl := range e.ownPipes {
		pl.Close()
	}
	if !e.sharedWeights {
		e.weights.free()
	}
	e.state.free()
	e.arena.free()
	return nil
}

// regionBuffers are the device buffers of one region of a plan (the weights, the state or the
// arena), one per buffer of its split (plan.Split): byte off of the region is byte off − start
// of the buffer that holds it.
type regionBuffers struct {
	split plan.Split
	size  uint64
	bufs  []*Buffer
}

// alloc allocates the buffers of a region of size bytes cut by split.
func (r *regionBuffers) alloc(d *Device, size uint64, split plan.Split) error {
	r.split, r.size = split, size
	for i := range split.Buffers() {
		a, b := split.Bounds(i, size)
		buf, err := d.NewBuffer(int64(max(b-a, 16)))
		if err != nil {
			if len(split) > 0 {
				return fmt.Errorf("buffer %d of %d (%d bytes): %w", i+1, split.Buffers(), b-a, err)
			}
			return fmt.Errorf("%d bytes: %w", b-a, err)
		}
		r.bufs = append(r.bufs, buf)
	}
	return nil
}

// at returns the buffer holding byte off of the region and off's offset in it.
func (r *regionBuffers) at(off uint64) (*Buffer, uint64) {
	i := r.split.Of(off)
	a, _ := r.split.Bounds(i, r.size)
	return r.bufs[i], off - a
}

// upload writes b at byte off of the region, across buffers where it spans several.
func (r *regionBuffers) upload(d *Device, off uint64, b []byte) error {
	for len(b) > 0 {
		i := r.split.Of(off)
		a, end := r.split.Bounds(i, r.size)
		n := min(uint64(len(b)), end-off)
		if err := d.Upload(r.bufs[i], int64(off-a), b[:n]); err != nil {
			return err
		}
		b, off = b[n:], off+n
	}
	return nil
}

// zero fills the region with zeros: directly where the memory is mapped, else on the device
// (Device.Zero; a KV cache may be gigabytes), the last bytes of a size not a multiple of 4 by an
// upload.
func (r *regionBuffers) zero(d *Device) error {
	for i, buf := range r.bufs {
		a, b := r.split.Bounds(i, r.size)
		n := b - a
		if m := buf.Bytes(); m != nil {
			clear(m[:n])
			continue
		}
		whole := n / 4 * 4
		if err := d.Zero(buf, 0, int64(whole)); err != nil {
			return err
		}
		if whole < n {
			if err := d.Upload(buf, int64(whole), make([]byte, n-whole)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *regionBuffers) free() {
	for _, b := range r.bufs {
		b.Free()
	}
	r.bufs = nil
}
