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

// compileTuned is Compile's measured path (DESIGN.md, "Choosing the graph after tuning, not
// before"), wired as package tune documents:
//
//  1. every kernel problem extraction asks about is tuned on the device (tune.Tuner.OpCost), so
//     the e-graph is extracted under measured costs;
//  2. the k cheapest diverse extractions of each function, plus the function as written, are
//     lowered with tuned kernels, run on random inputs, checked against the interpreter and
//     timed in paired rounds (tune.SelectFunctions); the fastest valid one wins;
//  3. the winners are lowered together into the plan, which records the selections and the
//     tuner's choices.
//
// Budget bounds all tuning and measuring: when it is spent, problems keep their best measured
// configuration or the static choice, and the rounds measured so far decide. A cancelled ctx
// (Ctrl-C) ends the compile with ctx's error after the database is saved, so no plan is written.
func compileTuned(ctx context.Context, m *ir.Model, fns []*ir.Function, opts Options, rep *Report,
	progress func(Progress), phase func(string, time.Time, string)) (*plan.Plan, error) {
	t0 := time.Now()
	progress(Progress{Phase: "device"})
	d, err := runtime.Open(runtime.Options{Device: opts.Device})
	if err != nil {
		return nil, fmt.Errorf("open device for tuning: %w", err)
	}
	defer d.Close()
	caps := tune.CapsOf(&d.Info)
	rep.Device = d.DeviceFingerprint()
	rep.DeviceFor = fmt.Sprintf("device %d, opened for tuning", d.Info.Index)
	phase("device", t0, d.Info.Name)

	// The reference evaluations selection checks candidates against need no device: they run
	// while kernels are tuned.
	refs := map[*ir.Function]*tune.Reference{}
	for _, f := range fns {
		refs[f] = tune.StartReference(m, f, 0)
	}

	db, err := tune.OpenDB(opts.TuneDB)
	if err != nil {
		return nil, err
	}
	if db.Warning != "" {
		rep.Notes = append(rep.Notes, db.Warning)
	}
	model := lower.ModelFor(rep.Device)
	tu := &tune.Tuner{
		Device: d, DB: db, Compiler: CompilerVersion(),
		Static: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
			return lower.StaticChoice(p, caps, model)
		},
		Progress: func(p tune.Progress) {
			progress(Progress{Phase: "tune", Done: p.Kernels, What: fmt.Sprintf("%d configurations (%d invalid) %s", p.Configs, p.Invalid, p.Current)})
		},
		Log:   func(msg string) { rep.Notes = append(rep.Notes, msg) },
		Trace: opts.TuneTrace,
	}
	defer tu.Close()
	// The budget is shared: kernel tuning gets the first three quarters, so the whole-program
	// candidates are still checked and timed against each other when tuning alone could use it all.
	tctx, cancel := ctx, context.CancelFunc(func() {})
	kctx, kcancel := ctx, context.CancelFunc(func() {})
	if opts.Budget > 0 {
		tctx, cancel = context.WithTimeout(ctx, opts.Budget)
		kctx, kcancel = context.WithTimeout(ctx, opts.Budget*3/4)
	}
	defer cancel()
	defer kcancel()
	save := func() {
		if err := db.Save(); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("tuning database not saved: %v", err))
		}
	}

	// 1. Survey: saturate and extract under the static cost model, listing every problem
	// extraction prices (each implementable e-node's kernel). The static extraction is kept as
	// a candidate, so the report shows whether measurement changed the choice of graph.
	t0 = time.Now()
	k := opts.Candidates
	if k <= 0 {
		k = 4
	}
	staticFn, enodeProbs, err := surveyProblems(ctx, m, fns)
	if err != nil {
		if ctx.Err() != nil {
			save()
			return nil, ctx.Err()
		}
		return nil, err
	}
	// 2. Tune those problems, cheapest first, each with a fair share of the first half of the
	// kernel budget (what they leave passes on to the lowering problems in step 4).
	estimate := tu.StaticEstimate(caps, func(l *kernels.Launch) time.Duration { return lower.Estimate(l, model) })
	actx, acancel := kctx, context.CancelFunc(func() {})
	if opts.Budget > 0 {
		actx, acancel = context.WithTimeout(kctx, opts.Budget*3/8)
	}
	tu.TuneAll(actx, tune.ByEstimate(enodeProbs, estimate))
	acancel()
	if ctx.Err() != nil {
		save()
		return nil, ctx.Err()
	}
	phase("tune", t0, fmt.Sprintf("%d e-graph problems: %s", len(enodeProbs), tu.Summary()))

	// 3. Extraction under measured costs: the tuner's time for an op's kernel, in the static cost
	// model's unit (bytes streamed at the device model's bandwidth); ops it could not measure
	// (views, problems no template serves, a share that ran out) keep the static estimate.
	t0 = time.Now()
	price := tu.KnownCost()
	cost := rules.CostFunc(func(n rules.CostNode) float64 {
		if dt, ok := price(n.Op, n.Attrs, n.Args, n.Outs); ok {
			return dt.Seconds() * model.Bandwidth
		}
		return rules.DefaultCost.Cost(n)
	})
	applied := map[string]uint64{}
	cands := map[*ir.Function][]tune.SelectCandidate{}
	for _, f := range fns {
		progress(Progress{Phase: "optimize", What: f.Name})
		gs, orep, err := rules.OptimizeK(ctx, m, f, rules.Options{Cost: cost}, k)
		if err != nil {
			if ctx.Err() != nil {
				save()
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("optimize %s: %w", f.Name, err)
		}
		for _, r := range orep.Rules {
			if r.Applied > 0 {
				applied[r.Name] += uint64(r.Applied)
			}
		}
		var cs []tune.SelectCandidate
		keys := map[string]bool{}
		for i, g := range gs {
			info := orep.Candidates[i]
			keys[rules.FunctionKey(g)] = true
			cs = append(cs, tune.SelectCandidate{Fn: g, Label: fmt.Sprintf("extraction %d: %s", i+1, info.Summary()),
				Estimated: time.Duration(info.Cost / model.Bandwidth * float64(time.Second))})
		}
		// The static extraction, when measured costs extracted something else, and the function
		// as written (valid whenever the model is, so a selection never fails because every
		// extraction needs a missing template).
		if sf := staticFn[f]; sf != nil && !keys[rules.FunctionKey(sf.fn)] {
			keys[rules.FunctionKey(sf.fn)] = true
			cs = append(cs, tune.SelectCandidate{Fn: sf.fn, Label: "static extraction: " + sf.info.Summary()})
		}
		if !keys[rules.FunctionKey(f)] {
			cs = append(cs, tune.SelectCandidate{Fn: f, Label: "as written"})
		}
		cands[f] = cs
	}
	rep.Optimized = true
	phase("optimize", t0, fmt.Sprintf("up to %d candidates per function under measured kernel costs, plus the static extraction and the graph as written", k))

	// 4. The kernels that run are lowering's problems (with fused epilogues and elementwise
	// chains), not the e-graph's: list them by lowering every candidate with static choices, and
	// tune the new ones with the rest of the kernel budget.
	t0 = time.Now()
	folds := lower.NewFoldCache()
	var lowProbs []*kernels.Problem
	dry := lower.Options{Caps: caps, Device: rep.Device, CompilerVersion: CompilerVersion(), Folds: folds,
		Choose: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
			lowProbs = append(lowProbs, p)
			return tu.Static(p)
		}}
	for _, f := range fns {
		for _, c := range cands[f] {
			progress(Progress{Phase: "tune", What: "listing kernels of " + f.Name + " " + c.Label})
			lower.Lower(m, []*ir.Function{c.Fn}, dry) // a candidate that cannot lower is rejected by selection, with the reason
		}
	}
	tu.TuneAll(kctx, tune.ByEstimate(lowProbs, estimate))
	if ctx.Err() != nil {
		save()
		return nil, ctx.Err()
	}
	phase("tune", t0, fmt.Sprintf("%d kernel problems of the candidates", len(tune.ByEstimate(lowProbs, nil))))

	// 5. Measured selection: tuning is over, lowering takes the tuner's choices as they stand.
	t0 = time.Now()
	over, overCancel := context.WithCancel(ctx)
	overCancel()
	lopts := lower.Options{Caps: caps, Device: rep.Device, CompilerVersion: CompilerVersion(), Choose: tu.Choose(over), Folds: folds}
	if opts.Weights == WeightsExternal {
		// Candidates are lowered with inline weights (they only run here); the plan written
		// references the file.
		rep.Notes = append(rep.Notes, "candidates were measured with inline weights; the plan references the weight file")
	}
	lowerFn := func(fs []*ir.Function) (*plan.Plan, error) {
		p, _, err := lower.Lower(m, fs, lopts)
		return p, err
	}
	winners, sels, err := tune.SelectFunctions(tctx, d, m, fns,
		func(f *ir.Function) ([]tune.SelectCandidate, error) { return cands[f], nil }, lowerFn, tune.SelectOptions{Trace: opts.TuneTrace, References: refs})
	save()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("measured selection: %w", err)
	}
	phase("select", t0, tu.Summary())
	for _, s := range sels {
		rep.Selections = append(rep.Selections, s.String())
	}

	t0 = time.Now()
	progress(Progress{Phase: "lower"})
	final := lopts
	if opts.Weights == WeightsExternal {
		if final.ExternalWeights, err = externalWeightsPath(m, opts); err != nil {
			return nil, err
		}
	}
	final.Folds = nil // external weights fold nothing; inline ones reuse nothing stale either way
	if opts.Weights != WeightsExternal {
		final.Folds = folds
	}
	p, lrep, err := lower.Lower(m, winners, final)
	if err != nil {
		return nil, err
	}
	save()
	if note := weightsNote(m, fns, winners, staticFn, lrep, lower.Options{Caps: caps, Device: rep.Device,
		CompilerVersion: CompilerVersion(), Folds: folds, ExternalWeights: final.ExternalWeights}); note != "" {
		rep.Notes = append(rep.Notes, note)
		p.Record.Notes = append(p.Record.Notes, note)
	}
	rep.Lower = lrep
	rep.Tuned = true
	phase("lower", t0, fmt.Sprintf("%d modules, measured choice", lrep.Modules))
	p.Record.Rules = ruleCounts(applied)
	for _, s := range sels {
		p.Record.Candidates = append(p.Record.Candidates, s.Record()...)
	}
	p.Record.Candidates = append(p.Record.Candidates, tu.Record()...)
	p.Record.Notes = append(p.Record.Notes, tu.Summary())
	rep.Notes = append(rep.Notes, tu.Summary())
	if kctx.Err() != nil && errors.Is(kctx.Err(), context.DeadlineExceeded) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("the tuning budget (%v) was spent: unmeasured problems kept the static choice", opts.Budget))
	}
	return p, nil
}

// staticExtraction is a function's extraction under the static cost model.
type staticExtraction struct {
	fn   *ir.Function
	info rules.CandidateInfo
}

// surveyProblems optimizes each function under the static cost model, returning its extraction
// and every distinct kernel problem extraction priced on the way: the problems of all
// implementable e-nodes, which measured extraction will ask about.
func surveyProblems(ctx context.Context, m *ir.Model, fns []*ir.Function) (map[*ir.Function]*staticExtraction, []*kernels.Problem, error) {
	var probs []*kernels.Problem
	seen := map[string]bool{}
	survey := rules.CostFunc(func(n rules.CostNode) float64 {
		if p, ok := tune.PricedProblem(n.Op, n.Attrs, n.Args, n.Outs); ok {
			if k := p.Key(); !seen[k] {
				seen[k] = true
				probs = append(probs, p)
			}
		}
		return rules.DefaultCost.Cost(n)
	})
	out := map[*ir.Function]*staticExtraction{}
	for _, f := range fns {
		g, orep, err := rules.Optimize(ctx, m, f, rules.Options{Cost: survey})
		if err != nil {
			return nil, nil, fmt.Errorf("optimize %s: %w", f.Name, err)
		}
		out[f] = &staticExtraction{fn: g, info: orep.Candidates[0]}
	}
	return out, probs, nil
}

// weightsNote says when the measured winners hold notably more weight memory than the static
// choice would: functions selected one at a time may fold or merge weights differently (prefill
// merging the Q/K/V projections, decode not), and the plan then holds both forms. Selection
// weighs time only, so the report makes the memory visible. "" when the winners are the static
// extractions or hold at most 5% more.
func weightsNote(m *ir.Model, fns, winners []*ir.Function, static map[*ir.Function]*staticExtraction,
	got *lower.Report, opts lower.Options) string {
	var sfns []*ir.Function
	same := true
	for i, f := range fns {
		sf := f
		if st := static[f]; st != nil {
			sf = st.fn
		}
		same = same && winners[i] == sf
		sfns = append(sfns, sf)
	}
	if same {
		return ""
	}
	_, srep, err := lower.Lower(m, sfns, opts)
	if err != nil || float64(got.Weights) <= 1.05*float64(srep.Weights) {
		return ""
	}
	return fmt.Sprintf("the measured winners hold %s of weights, the static choice %s: the functions fold or merge weights differently (selection weighs time, not memory; --no-tune keeps the smaller plan)",
		size(got.Weights), size(srep.Weights))
}
