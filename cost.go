package vkc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vkc-project/vkc/ir"
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
	// the stage ("e-graph problems", "kernel problems of the candidates").
	price(ctx context.Context, what string, probs []*kernels.Problem) (string, error)
	// cost is an e-node's price in the static cost model's unit (bytes), duration converts
	// that unit back to time.
	cost(n rules.CostNode) float64
	duration(cost float64) time.Duration
	// staticChoice is lowering's choice without measurement; choose is the source's choice
	// for lower.Options.Choose (nil: the static choice).
	staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
	choose(p *kernels.Problem) (*kernels.Template, kernels.Config, error)
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
	t     Target
	model lower.DeviceModel
}

func newEstimateSource(t Target) *estimateSource {
	return &estimateSource{t: t, model: lower.ModelFor(t.Device)}
}

func (s *estimateSource) name() string       { return "the static cost model" }
func (s *estimateSource) choiceName() string { return "static choice" }
func (s *estimateSource) target() Target     { return s.t }
func (s *estimateSource) prices() bool       { return false }
func (s *estimateSource) extracts() bool     { return false }
func (s *estimateSource) selects() bool      { return false }
func (s *estimateSource) extractions() int   { return 1 }
func (s *estimateSource) price(context.Context, string, []*kernels.Problem) (string, error) {
	return "", nil
}
func (s *estimateSource) cost(n rules.CostNode) float64 { return rules.DefaultCost.Cost(n) }
func (s *estimateSource) duration(c float64) time.Duration {
	return time.Duration(c / s.model.Bandwidth * float64(time.Second))
}
func (s *estimateSource) staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return lower.StaticChoice(p, s.t.Caps, s.model)
}
func (s *estimateSource) choose(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return s.staticChoice(p)
}
func (s *estimateSource) selectFunctions(context.Context, *ir.Model, []*ir.Function, map[*ir.Function][]tune.SelectCandidate,
	lower.Options) ([]*ir.Function, []*tune.Selection, string, error) {
	return nil, nil, "", errors.New("the static cost source does not select by measurement")
}
func (s *estimateSource) record(*plan.Plan, *Report) {}
func (s *estimateSource) close(*Report)              {}

// measureSource is the measured path's cost source (DESIGN.md, "Choosing the graph after
// tuning, not before"): kernels tuned on the device (tune.Tuner, with the tuning database),
// extraction under their measured times, and measured selection of whole functions
// (tune.SelectFunctions).
//
// The budget is shared: kernel tuning gets the first three quarters (the e-graph's problems the
// first half of that, what they leave passing on to the candidates' kernels), so whole-program
// candidates are still checked and timed against each other when tuning alone could use it all.
type measureSource struct {
	cfg   measureConfig
	opts  Options
	t     Target
	model lower.DeviceModel
	d     *runtime.Device
	db    *tune.DB
	// saveErr is what saving the database at close returned.
	saveErr error
	tu      *tune.Tuner
	refs    map[*ir.Function]*tune.Reference
	k       int

	stage          int // price calls so far
	tctx, kctx     context.Context
	cancel, kcanel context.CancelFunc
	sels           []*tune.Selection
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

// newMeasureSource opens the device and the tuning database. The reference evaluations that
// selection checks candidates against need no device: they start now and run while kernels are
// tuned.
func newMeasureSource(ctx context.Context, m *ir.Model, fns []*ir.Function, cfg measureConfig, opts Options, rep *Report,
	progress func(Progress)) (*measureSource, error) {
	d, err := runtime.Open(runtime.Options{Device: opts.Device})
	if err != nil {
		return nil, fmt.Errorf("open device for tuning: %w", err)
	}
	s := &measureSource{cfg: cfg, opts: opts, d: d, refs: map[*ir.Function]*tune.Reference{}, k: opts.Candidates}
	if s.k <= 0 {
		s.k = 4
	}
	s.t = Target{Caps: tune.CapsOf(&d.Info), Device: d.DeviceFingerprint()}
	s.model = lower.ModelFor(s.t.Device)
	rep.Device = s.t.Device
	rep.DeviceFor = fmt.Sprintf("device %d, opened for tuning", d.Info.Index)
	if s.db, err = tune.OpenDB(opts.TuneDB); err != nil {
		d.Close()
		return nil, err
	}
	// The database is not written over the model or its weights, nor over a file of another
	// kind unless forced; say so now rather than after tuning.
	s.db.Inputs, s.db.Force = []string{m.Source}, opts.ForceTuneDB
	if f, err := ModelWeightsFile(m); err == nil {
		s.db.Inputs = append(s.db.Inputs, f)
	}
	if err := s.db.CheckWritable(); err != nil {
		d.Close()
		return nil, err
	}
	if s.db.Warning != "" {
		rep.Notes = append(rep.Notes, s.db.Warning)
	}
	if cfg.selectFns {
		for _, f := range fns {
			s.refs[f] = tune.StartReference(m, f, 0)
		}
	}
	s.tu = &tune.Tuner{
		Device: d, DB: s.db, Compiler: CompilerVersion(),
		Static: s.staticChoice,
		Progress: func(p tune.Progress) {
			progress(Progress{Phase: "tune", Done: p.Kernels, What: fmt.Sprintf("%d configurations (%d invalid) %s", p.Configs, p.Invalid, p.Current)})
		},
		Log:    func(msg string) { rep.Notes = append(rep.Notes, msg) },
		Trace:  opts.TuneTrace,
		Budget: cfg.configs, Exhaustive: cfg.configs, SearchLimit: cfg.perSearch,
	}
	s.tctx, s.cancel = ctx, func() {}
	s.kctx, s.kcanel = ctx, func() {}
	if opts.Budget > 0 {
		s.tctx, s.cancel = context.WithTimeout(ctx, opts.Budget)
		s.kctx, s.kcanel = context.WithTimeout(ctx, opts.Budget*3/4)
	}
	return s, nil
}

func (s *measureSource) name() string       { return "measured kernel costs" }
func (s *measureSource) choiceName() string { return "measured choice" }
func (s *measureSource) target() Target     { return s.t }
func (s *measureSource) prices() bool       { return true }
func (s *measureSource) extracts() bool     { return s.cfg.extract }
func (s *measureSource) selects() bool      { return s.cfg.selectFns }
func (s *measureSource) extractions() int   { return s.k }

func (s *measureSource) estimate() func(*kernels.Problem) time.Duration {
	return s.tu.StaticEstimate(s.t.Caps, func(l *kernels.Launch) time.Duration { return lower.Estimate(l, s.model) })
}

// price tunes the problems cheapest first, each with a fair share of its stage's budget: the
// e-graph's problems (the first call) within 3/8 of the budget, the candidates' kernels (the
// second) within what is left of 3/4.
func (s *measureSource) price(ctx context.Context, what string, probs []*kernels.Problem) (string, error) {
	pctx, cancel := s.kctx, context.CancelFunc(func() {})
	if !s.cfg.selectFns {
		pctx = s.tctx // nothing to keep for selection
	} else if s.stage == 0 && s.opts.Budget > 0 {
		pctx, cancel = context.WithTimeout(s.kctx, s.opts.Budget*3/8)
	}
	s.stage++
	s.tu.TuneAll(pctx, tune.ByEstimate(probs, s.estimate()))
	cancel()
	if err := ctx.Err(); err != nil {
		return "", err
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
	return rules.DefaultCost.Cost(n)
}

func (s *measureSource) duration(c float64) time.Duration {
	return time.Duration(c / s.model.Bandwidth * float64(time.Second))
}

func (s *measureSource) staticChoice(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	return lower.StaticChoice(p, s.t.Caps, s.model)
}

// choose takes the tuner's choices as they stand: tuning is over when lowering asks (a problem
// first seen here gets the static choice, measured nothing).
func (s *measureSource) choose(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
	over, cancel := context.WithCancel(context.Background())
	cancel()
	return s.tu.Choose(over)(p)
}

func (s *measureSource) selectFunctions(ctx context.Context, m *ir.Model, fns []*ir.Function,
	cands map[*ir.Function][]tune.SelectCandidate, lopts lower.Options) ([]*ir.Function, []*tune.Selection, string, error) {
	lowerFn := func(fs []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fs, lopts)
		return p, err
	}
	winners, sels, err := tune.SelectFunctions(s.tctx, s.d, m, fns,
		func(f *ir.Function) ([]tune.SelectCandidate, error) { return cands[f], nil }, lowerFn,
		tune.SelectOptions{Trace: s.opts.TuneTrace, References: s.refs})
	if ctx.Err() != nil {
		return nil, nil, "", ctx.Err()
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("measured selection: %w", err)
	}
	s.sels = sels
	return winners, sels, s.tu.Summary(), nil
}

func (s *measureSource) record(p *plan.Plan, rep *Report) {
	rep.Tuned = true
	for _, sel := range s.sels {
		p.Record.Candidates = append(p.Record.Candidates, sel.Record()...)
	}
	p.Record.Candidates = append(p.Record.Candidates, s.tu.Record()...)
	p.Record.Notes = append(p.Record.Notes, s.tu.Summary())
	rep.Notes = append(rep.Notes, s.tu.Summary())
	if errors.Is(s.kctx.Err(), context.DeadlineExceeded) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the tuning budget (%v) was spent: unmeasured problems kept the static choice", s.opts.Budget))
	}
}

// close saves the database and releases the device; a failed save is a note in rep and kept in
// saveErr.
func (s *measureSource) close(rep *Report) {
	s.kcanel()
	s.cancel()
	s.tu.Close()
	s.saveErr = s.db.Save()
	if s.saveErr != nil && rep != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("tuning database not saved: %v", s.saveErr))
	}
	s.d.Close()
}
