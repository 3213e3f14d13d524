package vkc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/rules"
	"github.com/vkc-project/vkc/runtime"
)

// costSource is what the pipeline asks for prices and choices: the one place a compile's way of
// deciding plugs in. The static path's source estimates (estimateSource: the roofline model, the
// survey's extraction, a selection of one); the measured path's measures on the device
// (measureSource). A later source (a learned model, a shared remote database) implements the
// same methods: it may price problems without measuring (prices, extracts) and leave selection
// to its own estimate (selects false).
type costSource interface {
	// name says how extraction is priced, for the report ("measured kernel costs").
	name() string
	// choiceName says how kernels are chosen ("static choice", "measured choice").
	choiceName() string
	// target is the device the plan is for.
	target() Target
	// prices reports whether the source wants the problems listed and priced (the survey's
	// e-nodes, the candidates' kernels); extracts whether it extracts candidates under its own
	// costs (else the survey's extraction stands); selects whether it chooses among several
	// candidates by measuring them (else the first candidate is the plan's).
	prices() bool
	extracts() bool
	selects() bool
	// extractions is the number of diverse extractions per function when extracts.
	extractions() int
	// price prices problems (tuning them, for measurement) and says what it did; what names
	// the stage ("e-graph problems", "kernel problems of the candidates"). Each problem comes
	// with its share of its function's estimated time, for the source to spend its effort by.
	price(ctx context.Context, what string, probs []tune.Ranked) (string, error)
	// estimate is a problem's static estimate (its static choice's roofline time) and a floor
	// no kernel of it can beat (0: unknown).
	estimate(p *kernels.Problem) (est, floor time.Duration)
	// cost is an e-node's price in the static cost model's unit (bytes), duration converts
	// that unit back to time; staticCost is the static cost model's own price, which the
	// survey extracts under (staticChoices.cost).
	cost(n rules.CostNode) float64
	staticCost(n rules.CostNode) float64
	duration(cost float64) time.Duration
	// staticChoice is lowering's choice without measurement; chooser is the source's choice
	// for lower.Options.Choose (nil: lowering's own static choice, which reuses the launch it
	// built to choose).
	staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
	chooser() func(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
	// restoreSmall is told that f's selection was taken from the database: the kernel problems
	// its record lists as too small to tune stay at the static choice (its winner's kernels are
	// not listed again). recordSmall is told the kernel problems of f's winner after they were
	// priced, for the record of f's selection.
	restoreSmall(f *ir.Function)
	recordSmall(f *ir.Function, keys []string)
	// reserveLowering keeps d of the budget's end for lowering the plan: the pricing that
	// follows ends that much before it.
	reserveLowering(d time.Duration)
	// selectFunctions picks each function's winner among its candidates (selects only).
	selectFunctions(ctx context.Context, m *ir.Model, fns []*ir.Function, cands map[*ir.Function][]tune.SelectCandidate,
		lopts lower.Options) ([]*ir.Function, []*tune.Selection, string, error)
	// record adds the source's decisions to the plan's record and the report.
	record(p *plan.Plan, rep *Report)
	// close releases the device and saves what was measured; notes go to the report.
	close(rep *Report)
}

// estimateSource is the static path's cost source: roofline estimates (lower.Estimate,
// rules.DefaultCost), default configurations, no device opened.
type estimateSource struct {
	t      Target
	model  lower.DeviceModel
	static *staticChoices
}

func newEstimateSource(t Target) *estimateSource {
	s := &estimateSource{t: t, model: lower.ModelFor(t.Device)}
	s.static = &staticChoices{caps: t.Caps, model: s.model}
	return s
}

func (s *estimateSource) name() string       { return "the static cost model" }
func (s *estimateSource) choiceName() string { return "static choice" }
func (s *estimateSource) target() Target     { return s.t }
func (s *estimateSource) prices() bool       { return false }
func (s *estimateSource) extracts() bool     { return false }
func (s *estimateSource) selects() bool      { return false }
func (s *estimateSource) extractions() int   { return 1 }
func (s *estimateSource) price(context.Context, string, []tune.Ranked) (string, error) {
	return "", nil
}
func (s *estimateSource) estimate(p *kernels.Problem) (time.Duration, time.Duration) {
	return s.static.estimate(p)
}

// staticChoices memoises lowering's static choice per problem, with its roofline estimate and a
// floor for any kernel of the problem: its bytes at twice the device model's bandwidth (a
// model's bandwidth is what good kernels reach, not a hard limit; twice it is beyond the H200's
// peak). A tuned compile asks for a problem's static choice many times (ranking, listing the
// candidates' kernels, the tuner's baseline), and each builds every accepting template's
// kernel. It is safe for concurrent use.
type staticChoices struct {
	caps  kernels.Caps
	model lower.DeviceModel
	// db, when set, keeps the choices across compiles under key (tune.StaticEntry): a warm
	// compile ranks its problems without building their kernels.
	db  *tune.DB
	key func(p *kernels.Problem) tune.StaticKey
	mu  sync.Mutex
	m   map[string]*staticChoice
}

type staticChoice struct {
	done       chan struct{} // closed when the fields below are set
	t          *kernels.Template
	c          kernels.Config
	est, floor time.Duration
	err        error
}

func (sc *staticChoices) get(p *kernels.Problem) *staticChoice {
	k := p.Key()
	sc.mu.Lock()
	if sc.m == nil {
		sc.m = map[string]*staticChoice{}
	}
	if r, ok := sc.m[k]; ok {
		sc.mu.Unlock()
		<-r.done // made once: the candidates listed in parallel ask for the same problems at once
		return r
	}
	r := &staticChoice{done: make(chan struct{})}
	sc.m[k] = r
	sc.mu.Unlock()
	defer close(r.done)
	if sc.db != nil {
		if e, ok := sc.db.GetStatic(sc.key(p)); ok {
			if t := templateNamed(e.Template); t != nil && t.Space.Valid(p, e.Config, sc.caps) == nil {
				r.t, r.c, r.est, r.floor = t, e.Config, e.Estimate, e.Floor
				return r
			}
		}
	}
	var l *kernels.Launch
	r.t, r.c, l, r.est, r.err = lower.StaticLaunch(p, sc.caps, sc.model)
	if r.err == nil {
		r.floor = time.Duration(l.Bytes / (2 * sc.model.Bandwidth) * 1e9)
		if sc.db != nil {
			sc.db.PutStatic(&tune.StaticEntry{StaticKey: sc.key(p), Template: r.t.Name, Config: r.c, Estimate: r.est, Floor: r.floor})
		}
	}
	return r
}

// templateNamed returns the registered template of that name, or nil.
func templateNamed(name string) *kernels.Template {
	for _, t := range kernels.Templates() {
		if t.Name == name {
			return t
		}
	}
	return nil
}

func (sc *staticChoices) choose(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	r := sc.get(p)
	if r.err != nil {
		return nil, nil, r.err
	}
	return r.t, maps.Clone(r.c), nil
}

func (sc *staticChoices) estimate(p *kernels.Problem) (time.Duration, time.Duration) {
	r := sc.get(p)
	return r.est, r.floor
}

// cost is the static cost model of extraction, in rules.StaticCost's unit (bytes at the
// device model's bandwidth). On a GPU an operation that has a kernel costs its static choice's
// roofline estimate (lower.Estimate) plus the barrier after it (the device model's), a matmul
// 1% more (linear, its other form, fuses what lowering fuses), with rules.DefaultCost a
// thousandth as much to break other ties as it does. Slices (lowering makes a product's slices
// its parts, or a strided read), views, sources, operations no template serves, and every
// operation on a CPU device keep rules.DefaultCost.
//
// Pricing the kernel an operation will run, not its operands' bytes, lets extraction see that a
// fused form is served by a slower template than its parts. On the H100 (session 24), SmolLM2's
// prefill extracted under rules.DefaultCost fused rmsnorm into every product, served by
// matmul_coop where linear alone takes matmul_cm2, and took 1.14 times as long at 512 rows as
// the graph as written (docs/tuning.md, "The static extraction"). rules.DefaultCost prices a
// product's flops at an f32 rate and a launch at 1 MiB, so it sees neither the template nor the
// launch a GPU pays. A CPU device keeps it: lavapipe's templates show no such difference, and
// its device model prices a dispatch at a tenth of the ~40 µs it takes there, so estimates would
// undo fusions that pay.
func (sc *staticChoices) cost(n rules.CostNode) float64 {
	if !sc.caps.CPU && n.Op != ir.Slice {
		if p, ok := tune.PricedProblem(n.Op, n.Attrs, n.Args, n.Outs); ok {
			if est, _ := sc.estimate(p); est > 0 {
				c := (est + sc.model.Barrier).Seconds() * sc.model.Bandwidth
				if n.Op == ir.Matmul {
					// linear's kernels serve the same product with fused parts and epilogues
					// (lower/parts.go); a tie smaller than extraction's tolerance (a
					// billionth of the function's cost) would leave the choice to chance.
					c *= 1.01
				}
				return c + rules.DefaultCost.Cost(n)/1024
			}
		}
	}
	return rules.DefaultCost.Cost(n)
}

func (s *estimateSource) cost(n rules.CostNode) float64       { return s.static.cost(n) }
func (s *estimateSource) staticCost(n rules.CostNode) float64 { return s.static.cost(n) }
func (s *estimateSource) duration(c float64) time.Duration {
	return time.Duration(c / s.model.Bandwidth * float64(time.Second))
}
func (s *estimateSource) staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return s.static.choose(p)
}
func (s *estimateSource) chooser() func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return nil
}
func (s *estimateSource) selectFunctions(context.Context, *ir.Model, []*ir.Function, map[*ir.Function][]tune.SelectCandidate,
	lower.Options) ([]*ir.Function, []*tune.Selection, string, error) {
	return nil, nil, "", errors.New("the static cost source does not select by measurement")
}
func (s *estimateSource) restoreSmall(*ir.Function)          {}
func (s *estimateSource) reserveLowering(time.Duration)      {}
func (s *estimateSource) recordSmall(*ir.Function, []string) {}
func (s *estimateSource) record(p *plan.Plan, _ *Report)     { p.Record.ChosenBy = plan.ChosenStatic }
func (s *estimateSource) close(*Report)                      {}

// measureSource is the measured path's cost source (DESIGN.md, "Choosing the graph after
// tuning, not before"): kernels tuned on the device (tune.Tuner, with the tuning database),
// extraction under their measured times, and measured selection of whole functions
// (tune.SelectFunctions).
//
// The budget is shared: kernel tuning gets the first three quarters (the e-graph's problems the
// first half of that, what they leave passing on to the candidates' kernels), so whole-program
// candidates are still checked and timed against each other when tuning alone could use it all.
type measureSource struct {
	cfg  measureConfig
	opts Options
	// span is the part of the budget the measuring may take: Options.Budget less writeReserve.
	span  time.Duration
	t     Target
	model lower.DeviceModel
	// info is the device's description (runtime.Devices); device opens it on first need, so
	// a compile that measures nothing (a warm one) never does.
	info   runtime.DeviceInfo
	device func() (*runtime.Device, error)
	opened *runtime.Device
	db     *tune.DB
	// saveErr is what saving the database at close returned.
	saveErr error
	tu      *tune.Tuner
	refs    map[*ir.Function]*tune.Reference
	k       int

	static *staticChoices
	small  map[string]bool // problems left at the static choice as too small to tune
	start  time.Time       // the budget's start
	// lowering is the end of the budget kept for lowering the plan (reserveLowering).
	lowering time.Duration
	// guard abandons device work the budget's deadline leaves running (tune.DeviceGuard).
	guard *tune.DeviceGuard
	stage int // price calls so far
	notes []string
	// tctx bounds the whole compile's measuring (the budget), sctx the selection's (the
	// first three quarters: the winners' kernels are tuned in what is left).
	tctx, sctx      context.Context
	cancel, scancel context.CancelFunc
	// stopRefs ends the references' evaluations (nil: none started).
	stopRefs context.CancelFunc
	sels     []*tune.Selection
}

// measureConfig says which stages a measureSource measures: a compile extracts and selects;
// `vkc tune` (TuneKernels) tunes the kernels of the static extraction only.
type measureConfig struct {
	extract, selectFns bool
	// configs caps the configurations measured per template (0: the tuner's default);
	// perSearch bounds each template's search (0: none).
	configs   int
	perSearch time.Duration
}

// newMeasureSource finds the device and opens the tuning database; the device itself is opened
// when something is to be measured. The reference evaluations that selection checks candidates
// against need no device: they start now and run while kernels are tuned.
func newMeasureSource(ctx context.Context, m *ir.Model, fns []*ir.Function, cfg measureConfig, opts Options, rep *Report,
	progress func(Progress)) (*measureSource, error) {
	info, err := findDeviceInfo(opts.Device)
	if err != nil {
		return nil, err
	}
	s := &measureSource{cfg: cfg, opts: opts, info: info, refs: map[*ir.Function]*tune.Reference{}, k: opts.Candidates}
	s.device = sync.OnceValues(func() (*runtime.Device, error) {
		d, err := runtime.Open(runtime.Options{Device: opts.Device})
		if err != nil {
			return nil, fmt.Errorf("open device for tuning: %w", err)
		}
		if d.Info.Fingerprint != info.Fingerprint {
			d.Close()
			return nil, fmt.Errorf("open device for tuning: opened %s, not the %s found before", d.Info.Name, info.Name)
		}
		s.opened = d
		return d, nil
	})
	if s.k <= 0 {
		s.k = 4
	}
	s.t = withPolicy(Target{Caps: tune.CapsOf(&info), Device: Fingerprint(&info)}, opts)
	s.model = lower.ModelFor(s.t.Device)
	s.static = &staticChoices{caps: s.t.Caps, model: s.model}
	rep.Device = s.t.Device
	rep.DeviceFor = fmt.Sprintf("device %d, for tuning", info.Index)
	if s.db, err = tune.OpenDB(opts.TuneDB); err != nil {
		return nil, err
	}
	// The database is not written over the model or its weights, nor over a file of another
	// kind unless forced; say so now rather than after tuning.
	s.db.Inputs, s.db.Force = []string{m.Source}, opts.ForceTuneDB
	if f, err := ModelWeightsFile(m); err == nil {
		s.db.Inputs = append(s.db.Inputs, f)
	}
	if err := s.db.CheckWritable(); err != nil {
		return nil, err
	}
	s.static.db = s.db
	s.static.key = func(p *kernels.Problem) tune.StaticKey {
		return tune.StaticKey{Device: info.Fingerprint.String(), Driver: info.DriverVersion, Compiler: CompilerVersion(),
			Policy: fmt.Sprint("int8=", s.t.Caps.Int8), Problem: p.Key()}
	}
	if s.db.Warning != "" {
		rep.Notes = append(rep.Notes, s.db.Warning)
	}
	if cfg.selectFns {
		unfit := tune.ReferenceFits(m)
		if unfit != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("no candidate graph is checked against the interpreter: %v; they are checked against their function's static extraction run on the device instead", unfit))
		}
		var need []*ir.Function
		for _, f := range fns {
			// A function whose selection the database holds needs no reference unless its
			// candidates turn out different (SelectFunction then evaluates it itself).
			if e, ok := s.db.GetSelection(s.selectionKey(f)); !ok || !e.Reusable(opts.Budget) {
				need = append(need, f)
			}
		}
		var rctx context.Context
		rctx, s.stopRefs = context.WithCancel(context.Background())
		s.refs = startReferences(rctx, m, need, unfit, opts.Budget, rep)
	}
	if s.start = opts.start; s.start.IsZero() {
		s.start = time.Now()
	}
	s.span = opts.Budget - writeReserve(m, opts)
	if opts.Budget > 0 {
		s.guard = &tune.DeviceGuard{Deadline: s.start.Add(s.span)}
	}
	s.tu = &tune.Tuner{
		Open: s.device, Guard: s.guard, Caps: s.t.Caps, DB: s.db, Compiler: CompilerVersion(),
		Fingerprint: info.Fingerprint.String(), Driver: info.DriverVersion,
		Static: s.staticChoice,
		Progress: func(p tune.Progress) {
			left := ""
			if p.Deadline {
				left = fmt.Sprintf("%v left, ", p.TimeLeft.Round(time.Second))
			}
			progress(Progress{Phase: "tune", Done: p.Kernels, What: fmt.Sprintf("%s%d configurations (%d invalid) %s", left, p.Configs, p.Invalid, p.Current)})
		},
		Log:    func(msg string) { rep.Notes = append(rep.Notes, msg) },
		Trace:  opts.TuneTrace,
		Budget: cfg.configs, Exhaustive: cfg.configs, SearchLimit: cfg.perSearch,
		Timing: opts.timing,
	}
	if cfg.extract {
		// A compile records what its budget cut short, and takes as they stand the searches a
		// compile of the same budget cut (a warm compile measures nothing); `vkc tune`
		// resumes them.
		s.tu.CompileBudget = opts.Budget
	}
	s.tctx, s.cancel = ctx, func() {}
	s.sctx, s.scancel = ctx, func() {}
	if opts.Budget > 0 {
		// The budget counts from the start of the compile: parsing the functions, saturating
		// them and lowering the candidates are inside it; the final lowering is kept from its
		// end (reserveLowering), and so is writing the plan's weights (writeReserve).
		s.tctx, s.cancel = context.WithDeadline(ctx, s.start.Add(s.span))
		s.sctx, s.scancel = context.WithDeadline(ctx, s.start.Add(s.span*3/4))
	}
	return s, nil
}

// planWriteRate is the rate at which writeReserve expects a plan's weights to be written: the
// H100 machine's compile of the Llama-3.1-8B Q8_0 file (an 8.5 GB plan) took 7.3 s of wall time
// and 1.8 s of CPU (docs/bench/h100-2026-12-06, s14call1), about 1.5 GB a second; its measured
// compile at the default 15 s budget took 22 s.
const planWriteRate = 1 << 30

// writeReserve is the end of a measured compile's budget kept for writing the plan's inline
// weights after the compile (vkc compile writes them; a plan of external weights writes none),
// so that the compile's wall time stays near its budget for a large model: the weights' bytes
// at planWriteRate, at most half the budget.
func writeReserve(m *ir.Model, opts Options) time.Duration {
	if opts.Budget <= 0 || opts.Weights == WeightsExternal {
		return 0
	}
	var n int64
	for _, p := range m.Params {
		n += int64(p.Type.Bytes())
	}
	return min(time.Duration(float64(n)/planWriteRate*float64(time.Second)), opts.Budget/2)
}

func (s *measureSource) name() string       { return "measured kernel costs" }
func (s *measureSource) choiceName() string { return "measured choice" }
func (s *measureSource) target() Target     { return s.t }
func (s *measureSource) prices() bool       { return true }
func (s *measureSource) extracts() bool     { return s.cfg.extract }
func (s *measureSource) selects() bool      { return s.cfg.selectFns }
func (s *measureSource) extractions() int   { return s.k }

func (s *measureSource) estimate(p *kernels.Problem) (time.Duration, time.Duration) {
	return s.static.estimate(p)
}

// price tunes the problems by their share of their functions' estimated time, largest first
// (tune.Tuner.TunePlan). In a compile that selects, the e-graph's problems (the first call) are
// tuned within the first quarter of the budget, the selection has until three quarters (it
// stops sooner when its rounds are measured), and the winners' kernels (the second call) get
// what is left. Problems too small to move their function by more than the noise stay at the
// static choice, and the report says so.
func (s *measureSource) price(ctx context.Context, what string, probs []tune.Ranked) (string, error) {
	pctx, cancel := s.tctx, context.CancelFunc(func() {})
	switch {
	case s.cfg.selectFns && s.stage == 0 && s.opts.Budget > 0:
		pctx, cancel = context.WithDeadline(s.tctx, s.start.Add(s.span/4))
	case s.opts.Budget > 0 && s.lowering > 0:
		pctx, cancel = context.WithDeadline(s.tctx, s.start.Add(s.span-s.lowering))
	}
	s.stage++
	left := s.guard.Stragglers()
	pr := s.tu.TunePlan(pctx, probs)
	cancel()
	if s.guard.Stragglers() > left {
		// The phase ended on time; the device finishes the configuration before its next work.
		s.notes = append(s.notes, fmt.Sprintf("%s: the tuning phase's deadline came while the driver compiled or ran a configuration: left to finish, and the device's next work waited for it", what))
	}
	if s.small == nil {
		s.small = map[string]bool{}
	}
	for _, r := range pr.Small {
		s.small[r.Problem.Key()] = true
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if len(pr.Small) > 0 {
		s.notes = append(s.notes, fmt.Sprintf("%s: %d left at the static choice, each under %.0f%% of its function's estimated time (%.1f%% together): tuning one cannot move its function by more than the noise",
			what, len(pr.Small), 100*tune.Noise, 100*pr.SmallOf))
	}
	if len(pr.Unmet) > 0 {
		most := 0.0
		for _, r := range pr.Unmet {
			most = max(most, r.Share)
		}
		s.notes = append(s.notes, fmt.Sprintf("%s: %d not searched to the end (the largest %.1f%% of its function's estimated time): the budget ran out first; a compile with this budget takes them as they stand, a larger --budget or `vkc tune` continues them",
			what, len(pr.Unmet), 100*most))
	}
	return s.tu.Summary(), nil
}

// cost is the tuner's time for an op's kernel, in the static cost model's unit (bytes streamed
// at the device model's bandwidth); ops it could not measure (views, problems no template
// serves, a share that ran out) keep the static estimate.
func (s *measureSource) cost(n rules.CostNode) float64 {
	p, ok := tune.PricedProblem(n.Op, n.Attrs, n.Args, n.Outs)
	if ok {
		if dt, ok := s.tu.Known(p); ok {
			return dt.Seconds() * s.model.Bandwidth
		}
	}
	return s.static.cost(n)
}

func (s *measureSource) staticCost(n rules.CostNode) float64 { return s.static.cost(n) }

func (s *measureSource) duration(c float64) time.Duration {
	return time.Duration(c / s.model.Bandwidth * float64(time.Second))
}

func (s *measureSource) staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return s.static.choose(p)
}

// prefetch is the selection's Prefetch: the tuner's on a GPU; none on a CPU device, whose
// driver compiles on the cores that run the checks and timings (the candidates' lowering
// would take them too).
func (s *measureSource) prefetch() func(p *plan.Plan) {
	if s.tu.Caps.CPU {
		return nil
	}
	return s.tu.PrefetchPlan
}

// choose takes the tuner's choices as they stand: tuning is over when lowering asks (a problem
// first seen here gets the static choice, measured nothing).
func (s *measureSource) chooser() func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return s.choose
}

func (s *measureSource) choose(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	if s.small[p.Key()] {
		return s.staticChoice(p) // not worth a measurement (see price)
	}
	over, cancel := context.WithCancel(context.Background())
	cancel()
	return s.tu.Choose(over)(p)
}

// functionTolerance is what candidates are checked at (0: SelectOptions' default): with 8-bit
// activations allowed, tune.Int8FunctionTolerance.
func (s *measureSource) functionTolerance() float64 {
	if s.t.Caps.Int8 != kernels.Int8Off && s.t.Caps.IntegerDot {
		return tune.Int8FunctionTolerance
	}
	return 0
}

// selectionKey is the database key of function f's selection on this device and compiler.
func (s *measureSource) selectionKey(f *ir.Function) tune.SelectionKey {
	return tune.SelectionKey{Device: s.info.Fingerprint.String(), Driver: s.info.DriverVersion, Compiler: CompilerVersion(),
		Function: f.Name, Graph: graphKey(f)}
}

func (s *measureSource) reserveLowering(d time.Duration) { s.lowering = d }

// restoreSmall: the problems f's selection record lists as too small to tune stay at the static
// choice, as in the compile that measured it.
func (s *measureSource) restoreSmall(f *ir.Function) {
	e, ok := s.db.GetSelection(s.selectionKey(f))
	if !ok {
		return
	}
	if s.small == nil {
		s.small = map[string]bool{}
	}
	for _, k := range e.Small {
		s.small[k] = true
	}
}

// recordSmall adds to f's selection record the problems of its winner's kernels (keys) that
// were left at the static choice as too small to tune.
func (s *measureSource) recordSmall(f *ir.Function, keys []string) {
	e, ok := s.db.GetSelection(s.selectionKey(f))
	if !ok {
		return
	}
	e.Small = nil
	for _, k := range keys {
		if s.small[k] && !slices.Contains(e.Small, k) {
			e.Small = append(e.Small, k)
		}
	}
	sort.Strings(e.Small)
	s.db.PutSelection(e)
}

// startReferences starts the interpreter's reference of each function of fns (none, each saying
// why, when unfit is set). Functions that are one graph at their check length share one
// evaluation: prefill and its variant prefill@64 (both at tune.CheckLength), and SmolLM2's
// prefill@1 and decode, the same graph at one row. The evaluations run one after another and
// share the weights (interp.ParamCache: dropped with the last of them), and the checks wait for them in
// turn. The key is the graph's content: a key of its identity missed where a compile's derived
// functions (a top-k output) build graphs of their own at one length, and missed prefill@1 and
// decode altogether; on the H100 SmolLM2's chain of references took 10 s of a 15 s budget.
//
// A function whose reference would end past half the budget, after the references before it
// (tune.ReferenceTime: the 8B's prefill about 230 s), gets none: the checks wait for it, and the
// rounds need the other half. On the H100 a Llama-3.2-1B-shaped Q8_0 file's prefill@1 reference
// (estimated 5.8 s of a 15 s budget) was not ready when the selection's time ran out, and no
// function was timed. Its candidates are checked against its static extraction run on the
// device (tune.SelectFunction). The evaluations stop when ctx ends (the compile's measuring).
func startReferences(ctx context.Context, m *ir.Model, fns []*ir.Function, unfit error, budget time.Duration, rep *Report) map[*ir.Function]*tune.Reference {
	refs := map[*ir.Function]*tune.Reference{}
	byKey := map[string]*tune.Reference{}
	cache := interp.NewParamCache()
	var slow []string
	var chain time.Duration // the estimated time of the references started so far
	for _, f := range fns {
		if unfit != nil {
			refs[f] = tune.NoReference(unfit.Error())
			continue
		}
		var key string
		if at, err := f.At(tune.CheckAt(f)); err == nil {
			key = referenceKey(at)
		}
		if r := byKey[key]; key != "" && r != nil {
			refs[f] = r
			continue
		}
		d := tune.ReferenceTime(m, f)
		if budget > 0 && chain+d > budget/2 {
			why := fmt.Sprintf("the interpreter's reference would take about %v", d.Round(100*time.Millisecond))
			if chain > 0 {
				why += fmt.Sprintf(" after %v of references before it", chain.Round(100*time.Millisecond))
			}
			why += fmt.Sprintf(", past half the budget (%v)", budget)
			refs[f] = tune.NoReference(why)
			slow = append(slow, fmt.Sprintf("%s (about %v)", f.Name, d.Round(100*time.Millisecond)))
			continue
		}
		chain += d
		refs[f] = tune.StartReferenceContext(ctx, m, f, 0, cache)
		if key != "" {
			byKey[key] = refs[f]
		}
	}
	if len(slow) > 0 && rep != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("candidate graphs checked against their static extraction run on the device, not the interpreter: %s, whose references in the interpreter would end past half the budget (%v; --budget sets it)",
			strings.Join(slow, ", "), budget))
	}
	return refs
}

// referenceKey identifies what the interpreter computes for f: its graph and outputs
// (rules.FunctionKey) and its state updates.
func referenceKey(f *ir.Function) string {
	var b strings.Builder
	b.WriteString(rules.FunctionKey(f))
	for _, u := range f.Updates {
		b.WriteString("update " + u.Name + "=" + u.Value.Node.String() + "\n")
	}
	return sha256Hex(b.String())
}

// graphKey identifies a function's graph in the tuning database: the SHA-256 of its
// rules.FunctionKey (ops, attributes, types, structure), in hex.
func graphKey(f *ir.Function) string { return sha256Hex(rules.FunctionKey(f)) }

// sha256Hex is the SHA-256 of s in hex.
func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func (s *measureSource) selectFunctions(ctx context.Context, m *ir.Model, fns []*ir.Function,
	cands map[*ir.Function][]tune.SelectCandidate, lopts lower.Options) ([]*ir.Function, []*tune.Selection, string, error) {
	lowerFn := func(fs []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fs, lopts)
		return p, err
	}
	winners, sels, err := tune.SelectFunctions(s.sctx, nil, m, fns,
		func(f *ir.Function) ([]tune.SelectCandidate, error) { return cands[f], nil }, lowerFn,
		tune.SelectOptions{Open: s.device, Load: runtime.LoadOptions{Pipelines: s.tu.Kernel},
			NewKernels: s.tu.NewKernels, KernelCost: s.tu.KernelCost(), CompileCost: s.tu.CompileCost, CompilePricing: s.tu.CompilePricing, Prefetch: s.prefetch(), Guard: s.guard,
			Trace: s.opts.TuneTrace, References: s.refs, DB: s.db, Key: s.selectionKey, Timer: s.opts.planTimer, Budget: s.opts.Budget,
			Tolerance: s.functionTolerance()})
	t0 := time.Now()
	s.tu.StopPrefetch() // the candidates' kernels not made by now are not needed
	if s.opts.TuneTrace != nil {
		fmt.Fprintf(s.opts.TuneTrace, "select: the tuner's prefetch stopped in %v\n", time.Since(t0).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		return nil, nil, "", ctx.Err()
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("measured selection: %w", err)
	}
	winners = s.weighWeights(m, fns, cands, sels, winners, lopts)
	s.sels = sels
	return winners, sels, s.tu.Summary(), nil
}

// weighWeights weighs the weight memory the winners add against what they gain. Functions
// are selected one at a time, so their winners may fold or merge weights differently (prefill
// merging the Q/K/V projections, decode not) and the plan then holds both forms. When the
// winners' plan holds more than 5% more weight bytes than the static choices' would, the
// function whose winner gains least over its static extraction (measured, paired) gets the
// static extraction back unless that gain exceeds twice the noise plus half the extra memory
// (22% more weights asks for a winner 13% faster); then the next, until the plan is within 5%
// or every remaining winner pays for its memory. The database records the decision, so a warm
// compile makes the same plan.
func (s *measureSource) weighWeights(m *ir.Model, fns []*ir.Function, cands map[*ir.Function][]tune.SelectCandidate,
	sels []*tune.Selection, winners []*ir.Function, lopts lower.Options) []*ir.Function {
	differ, recorded := false, true
	for i, sel := range sels {
		differ = differ || i < len(fns) && !cands[fns[i]][sel.Winner].Static
		recorded = recorded && sel.Recorded
	}
	if len(sels) != len(fns) || !differ || recorded {
		// Recorded selections carry the weighing of the compile that measured them (SetWinner
		// recorded a static extraction it put back).
		return winners
	}
	weights := func(fs []*ir.Function) (uint64, bool) {
		_, r, err := lower.Lower(m, fs, lopts)
		if err != nil {
			return 0, false
		}
		return r.Weights, true
	}
	static := make([]int, len(fns))
	sfns := make([]*ir.Function, len(fns))
	for i, f := range fns {
		static[i], sfns[i] = -1, winners[i]
		for j, c := range cands[f] {
			if c.Static {
				static[i], sfns[i] = j, c.Fn
			}
		}
	}
	sw, ok := weights(sfns)
	if !ok || sw == 0 {
		return winners
	}
	for {
		w, ok := weights(winners)
		if !ok {
			return winners
		}
		extra := float64(w)/float64(sw) - 1
		if extra <= 0.05 {
			return winners
		}
		least, gain := -1, 0.0
		for i, sel := range sels {
			j := static[i]
			if j < 0 || sel.Winner == j || !sel.Results[j].Valid || sel.Results[j].Ratio <= 0 {
				continue
			}
			g := sel.Results[j].Ratio - 1
			if r := sel.Results[j].ShortRatio; r > 0 {
				g = min(g, r-1) // timed at a short length too: the smaller gain
			}
			if least < 0 || g < gain {
				least, gain = i, g
			}
		}
		if least < 0 || gain > 2*tune.Noise+extra/2 {
			return winners
		}
		sel := sels[least]
		why := fmt.Sprintf("%s was %.1f%% faster than the static extraction, but with it the plan holds %.0f%% more weight memory (%s against %s): the static extraction stands",
			cands[fns[least]][sel.Winner].Label, 100*gain, 100*extra, size(w), size(sw))
		sel.SetWinner(static[least], why, s.db, s.selectionKey(fns[least]))
		winners[least] = sfns[least]
	}
}

func (s *measureSource) record(p *plan.Plan, rep *Report) {
	rep.Tuned = true
	p.Record.ChosenBy = plan.ChosenMeasured
	for _, sel := range s.sels {
		p.Record.Candidates = append(p.Record.Candidates, sel.Record()...)
	}
	// The tuner's decisions for the kernels the plan runs (not every problem it priced), so
	// that the record, like the plan, depends only on the model and the database.
	runs := map[string]bool{}
	if rep.Lower != nil {
		for _, f := range rep.Lower.Functions {
			for _, k := range f.Kernels {
				runs[k.Problem] = true
			}
		}
	}
	for _, c := range s.tu.Record() {
		if runs[c.Subject] {
			p.Record.Candidates = append(p.Record.Candidates, c)
		}
	}
	rep.Notes = append(rep.Notes, s.notes...)
	rep.Notes = append(rep.Notes, s.tu.Summary())
	if errors.Is(s.tctx.Err(), context.DeadlineExceeded) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the tuning budget (%v) was spent: unmeasured problems kept the static choice", s.opts.Budget))
	}
}

// close saves the database and releases the device (when it was opened); a failed save is a
// note in rep and kept in saveErr.
func (s *measureSource) close(rep *Report) {
	s.scancel()
	s.cancel()
	if s.stopRefs != nil {
		s.stopRefs()
	}
	s.saveErr = s.db.Save()
	if s.saveErr != nil && rep != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("tuning database not saved: %v", s.saveErr))
	}
	release := func() {
		s.tu.Close()
		if s.opened != nil {
			s.opened.Close()
		}
	}
	switch {
	case s.guard.Busy():
		// The driver is still compiling (or running) what the deadline abandoned: the
		// compile ends now, the device is released when the driver returns (or with the
		// process).
		go release()
		if rep != nil {
			rep.Notes = append(rep.Notes, AbandonedNote)
		}
	default:
		release()
		if s.opened == nil && rep != nil {
			rep.Notes = append(rep.Notes, NotOpenedNote)
		}
	}
}

// AbandonedNote is the report's note when the budget's deadline came while the device worked on
// something that cannot be interrupted (a driver compiling a kernel): the compile ended at the
// deadline and left that work to finish on its own.
const AbandonedNote = "the budget's deadline came while the driver compiled a kernel: that work was abandoned, and the compile ended at the deadline"

// NotOpenedNote is the report's note when a measured compile opened no device: the database
// held everything it would have measured.
const NotOpenedNote = "the device was not opened: the tuning database held every search and selection"
