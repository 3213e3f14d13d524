package vkc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/vkc-project/vkc/internal/par"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/rules"
)

// The compile pipeline. Static and measured compiles are one sequence of stages; what differs is
// the cost source (see costSource): a roofline estimate, or measurement on the device.
//
//  1. survey:  saturate each function in the e-graph and extract it under the static cost model,
//     listing the kernel problem of every e-node extraction priced (when the source prices);
//  2. price:   the source prices those problems (the estimate does nothing; measurement tunes
//     them on the device);
//  3. extract: the source's candidates per function: under the estimate, the survey's
//     extraction; under measurement, the k cheapest diverse extractions under measured costs,
//     plus the static extraction and the function as written;
//  4. select:  one candidate per function (a selection of one takes it; measurement runs the
//     candidates against the interpreter, with the kernels as tuned so far, and times them);
//  5. lower:   the kernels that will run are lowering's problems (fused epilogues and
//     elementwise chains), listed by lowering the winners (without measured selection: the
//     first candidate that lowers), and priced in turn;
//  6. plan:    the winners are lowered together into the plan, with the source's kernel choices.

// compilePipeline runs the compile pipeline for fns with the cost source the options ask for:
// measurement on the device with Options.Tune (and no Target), else the static estimate.
func compilePipeline(ctx context.Context, m *ir.Model, fns []*ir.Function, opts Options, rep *Report,
	progress func(Progress), phase func(string, time.Time, string)) (_ *plan.Plan, err error) {
	pl := &pipeline{m: m, fns: fns, opts: opts, rep: rep, progress: progress, phase: phase, folds: lower.NewFoldCache()}
	measured := opts.Tune && opts.Target == nil
	if !opts.NoOptimize {
		// The e-graphs need no device: they saturate while it opens.
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		pl.optimized = pl.optimizeAll(octx)
	}
	if measured {
		t0 := time.Now()
		progress(Progress{Phase: "device"})
		src, err := newMeasureSource(ctx, m, fns, measureConfig{extract: true, selectFns: true, configs: opts.tuneConfigs}, opts, rep, progress)
		if err != nil {
			return nil, err
		}
		defer src.close(rep)
		phase("device", t0, src.info.Name)
		pl.src = src
	} else {
		if opts.Tune {
			rep.Notes = append(rep.Notes, "Tune needs a device, not a device-free Target: static choice")
		}
		t0 := time.Now()
		progress(Progress{Phase: "device"})
		target, how, err := findTarget(opts)
		if err != nil {
			return nil, err
		}
		rep.Device, rep.DeviceFor = target.Device, how
		phase("device", t0, target.Device.DeviceName)
		pl.src = newEstimateSource(target)
	}
	if opts.Weights == WeightsExternal {
		if _, err := externalWeightsPath(m, opts); err != nil {
			return nil, err
		}
	}
	return pl.run(ctx)
}

// pipeline is one compile in progress: the model and functions, the cost source, and what each
// stage leaves for the next.
type pipeline struct {
	m    *ir.Model
	fns  []*ir.Function // as written (with the argmax outputs when asked)
	opts Options
	rep  *Report
	src  costSource

	progress func(Progress)
	phase    func(name string, t0 time.Time, note string)

	optimized func() []saturated                 // the survey's saturations (optimizeAll)
	static    map[*ir.Function]*staticExtraction // the survey's extraction of each function
	sats      map[*ir.Function]*rules.Saturated  // the survey's e-graphs, until extraction
	problems  []tune.Ranked                      // the e-graph's priced problems (when the source extracts)
	cands     map[*ir.Function][]tune.SelectCandidate
	first     map[*ir.Function]int // without measured selection: the candidate that lowers
	applied   map[string]uint64    // rule applications summed over the functions
	folds     *lower.FoldCache
}

// staticExtraction is a function's extraction under the static cost model.
type staticExtraction struct {
	fn   *ir.Function
	info rules.CandidateInfo
}

// run drives the stages and returns the plan. A cancelled ctx ends it with ctx's error (the
// source has saved what it measured).
func (pl *pipeline) run(ctx context.Context) (*plan.Plan, error) {
	if err := pl.survey(ctx); err != nil {
		return nil, err
	}
	if err := pl.price(ctx, "tune", "e-graph problems", pl.problems); err != nil {
		return nil, err
	}
	if err := pl.extract(ctx); err != nil {
		return nil, err
	}
	if !pl.src.selects() {
		if err := pl.priceLowering(ctx); err != nil {
			return nil, err
		}
	}
	winners, err := pl.selectWinners(ctx)
	if err != nil {
		return nil, err
	}
	if pl.src.selects() {
		// The graph is chosen; what is left of the budget tunes the kernels it runs.
		if err := pl.priceWinners(ctx, winners); err != nil {
			return nil, err
		}
	}
	return pl.lowerPlan(ctx, winners)
}

// survey is stage 1. With Options.NoOptimize the functions stay as written.
func (pl *pipeline) survey(ctx context.Context) error {
	t0 := time.Now()
	pl.static = map[*ir.Function]*staticExtraction{}
	pl.applied = map[string]uint64{}
	if pl.opts.NoOptimize {
		pl.phase("optimize", t0, "skipped (NoOptimize): functions lowered as written")
		return nil
	}
	pl.progress(Progress{Phase: "optimize"})
	if pl.optimized == nil {
		pl.optimized = pl.optimizeAll(ctx)
	}
	sats := pl.optimized()
	capture := pl.src.extracts()
	res := par.Map(sats, func(s saturated) surveyed {
		if s.err != nil {
			return surveyed{orep: s.orep, err: s.err}
		}
		var seen map[string]*kernels.Problem
		cost := pl.src.staticCost
		if capture {
			// Extraction under the source's costs will ask about every implementable e-node.
			seen = map[string]*kernels.Problem{}
			cost = func(n rules.CostNode) float64 {
				if p, ok := tune.PricedProblem(n.Op, n.Attrs, n.Args, n.Outs); ok {
					if k := p.Key(); seen[k] == nil {
						seen[k] = p
					}
				}
				return pl.src.staticCost(n)
			}
		}
		gs, orep, err := s.sat.Extract(rules.CostFunc(cost), 1)
		if err != nil {
			return surveyed{orep: orep, err: err}
		}
		sat := s.sat
		if !capture {
			sat = nil // nothing extracts again
		}
		return surveyed{gs[0], orep, seen, sat, nil}
	})
	// Ranking estimates every priced problem (its static choice builds each accepting
	// template's kernel; on a GPU the extraction above built most): the rest in parallel first.
	var priced []*kernels.Problem
	for _, r := range res {
		for _, p := range r.seen {
			priced = append(priced, p)
		}
	}
	par.Map(priced, func(p *kernels.Problem) time.Duration { est, _ := pl.src.estimate(p); return est })
	var notes []string
	for i, f := range pl.fns {
		g, orep, err := res[i].g, res[i].orep, res[i].err
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("optimize %s: %w", f.Name, err)
		}
		pl.static[f] = &staticExtraction{fn: g, info: orep.Candidates[0]}
		if res[i].sat != nil {
			if pl.sats == nil {
				pl.sats = map[*ir.Function]*rules.Saturated{}
			}
			pl.sats[f] = res[i].sat
		}
		if res[i].seen != nil {
			pl.problems = append(pl.problems, pl.rankEGraph(g, res[i].seen)...)
		}
		if !pl.src.extracts() {
			pl.count(orep)
		}
		notes = append(notes, fmt.Sprintf("%s %d→%d nodes (%s, %d iterations)", f.Name, orep.InputNodes, orep.OutputNodes, orep.Stop, orep.Iterations))
	}
	pl.rep.Optimized = true
	note := joinNotes(notes)
	if pl.src.extracts() {
		note += fmt.Sprintf("; %d kernel problems to price", len(pl.problems))
	}
	pl.phase("optimize", t0, note)
	return nil
}

// surveyed is one function's optimisation under the static cost model: its extraction and, when
// the source extracts under its own costs, the problems that extraction will price.
type surveyed struct {
	g    *ir.Function
	orep *rules.Report
	seen map[string]*kernels.Problem
	sat  *rules.Saturated // the e-graph, for extraction under the source's costs
	err  error
}

// optimizeAll starts saturating every function's e-graph in the background, in parallel (each
// e-graph is its own; a warm compile's time is mostly this and extraction), and returns the
// function that waits for the results, in pl.fns' order. The extraction waits for the cost
// source (survey): it prices e-nodes with the static choices' estimates on the source's device.
func (pl *pipeline) optimizeAll(ctx context.Context) func() []saturated {
	done := make(chan []saturated, 1)
	go func() {
		done <- par.Map(pl.fns, func(f *ir.Function) saturated {
			sat, orep, err := rules.Saturate(ctx, pl.m, f, rules.Options{})
			return saturated{sat, orep, err}
		})
	}()
	return sync.OnceValue(func() []saturated { return <-done })
}

// saturated is one function's saturated e-graph (optimizeAll).
type saturated struct {
	sat  *rules.Saturated
	orep *rules.Report
	err  error
}

// count adds an optimisation's rule applications to the plan's record.
func (pl *pipeline) count(orep *rules.Report) {
	for _, r := range orep.Rules {
		if r.Applied > 0 {
			pl.applied[r.Name] += uint64(r.Applied)
		}
	}
}

// rankEGraph ranks the problems the extraction of function g priced: each by its uses in the
// static extraction g (at least one: an alternative costs a kernel where it is used) times its
// estimate, over g's estimated time, the estimates of its ops' problems summed (the same
// estimate, so that shares are comparable; the extraction's own cost counts a launch as a
// megabyte of traffic, which is a ranking device, not a time).
func (pl *pipeline) rankEGraph(g *ir.Function, seen map[string]*kernels.Problem) []tune.Ranked {
	uses := map[string]int{}
	var fnEst time.Duration
	for _, n := range g.Nodes {
		args := make([]ir.Type, len(n.Args))
		for i, a := range n.Args {
			args[i] = a.Type()
		}
		if p, ok := tune.ProblemOf(n.Op, n.Attrs, args, n.Outs); ok {
			uses[p.Key()]++
			est, _ := pl.src.estimate(p)
			fnEst += est
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []tune.Ranked
	for _, k := range keys {
		out = append(out, pl.rank(seen[k], max(uses[k], 1), fnEst))
	}
	return out
}

// rank is a problem's share of a function's estimated time fnEst when it runs uses times.
func (pl *pipeline) rank(p *kernels.Problem, uses int, fnEst time.Duration) tune.Ranked {
	est, floor := pl.src.estimate(p)
	r := tune.Ranked{Problem: p, Uses: uses, Floor: floor, Share: 1}
	if fnEst > 0 {
		r.Share = min(1, float64(uses)*float64(est)/float64(fnEst))
	}
	return r
}

// price is stages 2 and 4: the source prices problems; the phase is reported when it did work.
func (pl *pipeline) price(ctx context.Context, phase, what string, probs []tune.Ranked) error {
	if !pl.src.prices() || len(probs) == 0 {
		return nil
	}
	t0 := time.Now()
	note, err := pl.src.price(ctx, what, probs)
	if err != nil {
		return err
	}
	distinct := map[string]bool{}
	for _, r := range probs {
		distinct[r.Problem.Key()] = true
	}
	pl.phase(phase, t0, fmt.Sprintf("%d %s: %s", len(distinct), what, note))
	return nil
}

// extract is stage 3.
func (pl *pipeline) extract(ctx context.Context) error {
	pl.cands = map[*ir.Function][]tune.SelectCandidate{}
	k := pl.src.extractions()
	if !pl.src.extracts() || pl.opts.NoOptimize {
		for _, f := range pl.fns {
			var cs []tune.SelectCandidate
			if st := pl.static[f]; st != nil {
				cs = append(cs, tune.SelectCandidate{Fn: st.fn, Label: "static extraction: " + st.info.Summary(),
					Key: graphKey(st.fn), Static: true})
			}
			// The function as written, which lowers whenever the model is valid: the static
			// path falls back to it when the extraction needs a template that does not exist.
			cs = append(cs, tune.SelectCandidate{Fn: f, Label: "as written", Key: graphKey(f), Static: len(cs) == 0})
			pl.cands[f] = cs
		}
		return nil
	}
	t0 := time.Now()
	pl.progress(Progress{Phase: "optimize", What: "extracting candidates"})
	type extracted struct {
		gs   []*ir.Function
		orep *rules.Report
		err  error
	}
	res := par.Map(pl.fns, func(f *ir.Function) extracted {
		// The survey's saturated e-graph serves this extraction too.
		if sat := pl.sats[f]; sat != nil {
			gs, orep, err := sat.Extract(rules.CostFunc(pl.src.cost), k)
			return extracted{gs, orep, err}
		}
		gs, orep, err := rules.OptimizeK(ctx, pl.m, f, rules.Options{Cost: rules.CostFunc(pl.src.cost)}, k)
		return extracted{gs, orep, err}
	})
	pl.sats = nil
	for i, f := range pl.fns {
		gs, orep, err := res[i].gs, res[i].orep, res[i].err
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("optimize %s: %w", f.Name, err)
		}
		pl.count(orep)
		// The static extraction comes first: it is what a --no-tune plan runs, it wins ties,
		// and it stands when nothing could be measured. Then the measured extractions that
		// differ from it, and the function as written (valid whenever the model is, so a
		// selection never fails because every extraction needs a missing template).
		var cs []tune.SelectCandidate
		keys := map[string]bool{}
		if sf := pl.static[f]; sf != nil {
			k := graphKey(sf.fn)
			keys[k] = true
			cs = append(cs, tune.SelectCandidate{Fn: sf.fn, Label: "static extraction: " + sf.info.Summary(), Key: k, Static: true})
		}
		for i, g := range gs {
			info := orep.Candidates[i]
			k := graphKey(g)
			if keys[k] {
				if len(cs) > 0 && cs[0].Key == k && cs[0].Estimated == 0 {
					cs[0].Estimated = pl.src.duration(info.Cost)
					cs[0].Label = fmt.Sprintf("static extraction = extraction %d: %s", i+1, info.Summary())
				}
				continue
			}
			keys[k] = true
			cs = append(cs, tune.SelectCandidate{Fn: g, Label: fmt.Sprintf("extraction %d: %s", i+1, info.Summary()),
				Estimated: pl.src.duration(info.Cost), Key: k})
		}
		if k := graphKey(f); !keys[k] {
			cs = append(cs, tune.SelectCandidate{Fn: f, Label: "as written", Key: k, Static: len(cs) == 0})
		}
		pl.cands[f] = cs
	}
	pl.phase("optimize", t0, fmt.Sprintf("up to %d candidates per function under %s, plus the static extraction and the graph as written", k, pl.src.name()))
	return nil
}

// listing is the kernel problems of one graph, ranked (pipeline.list).
type listing struct {
	probs []tune.Ranked
	err   error
}

// priceWinners is stage 5 with measured selection: each winner is lowered with static choices to
// list the kernels it runs (in parallel; they share only the fold cache), and the source prices
// them with what is left of the budget. A winner taken from the database's record of its
// selection is not listed: its kernels were priced when it was measured, and the problems
// found too small to tune then stay so.
func (pl *pipeline) priceWinners(ctx context.Context, winners []*ir.Function) error {
	recorded := map[string]bool{}
	for _, s := range pl.rep.selections {
		recorded[s.Function] = s.Recorded
	}
	var jobs []int
	for i, f := range pl.fns {
		if recorded[f.Name] {
			pl.src.restoreSmall(f)
			continue
		}
		jobs = append(jobs, i)
	}
	if len(jobs) == 0 {
		pl.phase("list", time.Now(), fmt.Sprintf("nothing: the selections of all %d functions are recorded", len(pl.fns)))
		return nil
	}
	t0 := time.Now()
	pl.progress(Progress{Phase: "tune", What: fmt.Sprintf("listing the kernels of %d winners", len(jobs))})
	listed := par.Map(jobs, func(i int) listing { return pl.list(ctx, winners[i]) })
	if err := ctx.Err(); err != nil {
		return err
	}
	note := fmt.Sprintf("the kernels of %d winners, each lowered with static choices", len(jobs))
	if n := len(pl.fns) - len(jobs); n > 0 {
		note += fmt.Sprintf(" (%d functions' selections are recorded)", n)
	}
	pl.phase("list", t0, note)
	// The plan is lowered after the tuning, within the budget: it takes about what lowering
	// the winners to list them took; twice that is kept for it.
	pl.src.reserveLowering(2 * time.Since(t0))
	var probs []tune.Ranked
	for _, l := range listed {
		probs = append(probs, l.probs...)
	}
	if err := pl.price(ctx, "tune", "kernel problems of the winners", probs); err != nil {
		return err
	}
	for k, i := range jobs {
		var keys []string
		for _, r := range listed[k].probs {
			keys = append(keys, r.Problem.Key())
		}
		pl.src.recordSmall(pl.fns[i], keys)
	}
	return nil
}

// list lowers g with static choices and returns the problems it asks for (once per distinct
// key), each ranked by its uses (its units) and g's estimated time.
func (pl *pipeline) list(ctx context.Context, g *ir.Function) listing {
	dry := pl.lowerOptions()
	dry.Context = ctx
	var mu sync.Mutex
	byKey := map[string]*kernels.Problem{}
	dry.Choose = func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
		mu.Lock()
		byKey[p.Key()] = p
		mu.Unlock()
		return pl.src.staticChoice(p)
	}
	_, lrep, err := lower.Lower(pl.m, []*ir.Function{g}, dry)
	if err != nil {
		return listing{err: err}
	}
	uses := map[string]int{}
	for _, k := range lrep.Functions[0].Kernels {
		uses[k.Problem]++
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out listing
	for _, k := range keys {
		out.probs = append(out.probs, pl.rank(byKey[k], max(uses[k], 1), lrep.Functions[0].Estimated))
	}
	return out
}

// priceLowering is stage 5 without measured selection (the static path; vkc tune): the first
// candidate of each function that lowers is lowered with static choices to list the kernels it
// runs, and the source prices them.
func (pl *pipeline) priceLowering(ctx context.Context) error {
	pl.first = map[*ir.Function]int{}
	if !pl.src.prices() {
		return nil
	}
	var probs []tune.Ranked
	for _, f := range pl.fns {
		for i, c := range pl.cands[f] {
			pl.progress(Progress{Phase: "tune", What: "listing kernels of " + f.Name + " " + c.Label})
			r := pl.list(ctx, c.Fn)
			if err := ctx.Err(); err != nil {
				return err
			}
			if errors.Is(r.err, lower.ErrNoTemplate) && i+1 < len(pl.cands[f]) {
				pl.rep.Notes = append(pl.rep.Notes, fmt.Sprintf("%s: the %s does not lower (%v); using the %s", f.Name, c.Label, r.err, pl.cands[f][i+1].Label))
				continue
			}
			probs = append(probs, r.probs...)
			pl.first[f] = i
			break
		}
	}
	return pl.price(ctx, "tune", "kernel problems of the candidates", probs)
}

// selectWinners is stage 5.
func (pl *pipeline) selectWinners(ctx context.Context) ([]*ir.Function, error) {
	if !pl.src.selects() {
		winners := make([]*ir.Function, len(pl.fns))
		for i, f := range pl.fns {
			winners[i] = pl.cands[f][pl.first[f]].Fn
		}
		return winners, nil
	}
	t0 := time.Now()
	lopts := pl.lowerOptions()
	lopts.Choose = pl.src.chooser()
	lopts.Context = ctx
	if pl.opts.Weights == WeightsExternal {
		// Candidates are lowered with inline weights (they only run here); the plan written
		// references the file.
		pl.rep.Notes = append(pl.rep.Notes, "candidates were measured with inline weights; the plan references the weight file")
	}
	winners, sels, note, err := pl.src.selectFunctions(ctx, pl.m, pl.fns, pl.cands, lopts)
	if err != nil {
		return nil, err
	}
	pl.phase("select", t0, note)
	for _, s := range sels {
		pl.rep.Selections = append(pl.rep.Selections, s.String())
	}
	pl.rep.selections = sels
	return winners, nil
}

// lowerPlan is stage 6. Without measured selection, a winner that needs a kernel template that
// does not exist yet falls back to the functions as written, and the report says why.
func (pl *pipeline) lowerPlan(ctx context.Context, winners []*ir.Function) (*plan.Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	pl.progress(Progress{Phase: "lower"})
	lopts := pl.lowerOptions()
	lopts.Choose = pl.src.chooser()
	lopts.Context = ctx
	lopts.Progress = func(done, total int, what string) {
		pl.progress(Progress{Phase: "lower", Done: done, Total: total, What: what})
	}
	if pl.opts.Weights == WeightsExternal {
		var err error
		if lopts.ExternalWeights, err = externalWeightsPath(pl.m, pl.opts); err != nil {
			return nil, err
		}
		lopts.Folds = nil // external weights fold nothing
	}
	p, lrep, err := lower.Lower(pl.m, winners, lopts)
	var fallback string
	if errors.Is(err, lower.ErrNoTemplate) && !pl.src.selects() && pl.rep.Optimized {
		// The extracted graph uses an op (a fusion) that no kernel template implements yet on
		// this device; the graph as written may still compile. Say so rather than fail.
		fallback = fmt.Sprintf("the optimised graph does not lower (%v); lowered the functions as written", err)
		pl.rep.Optimized, pl.applied = false, nil
		winners = pl.fns
		p, lrep, err = lower.Lower(pl.m, winners, lopts)
	}
	if err != nil {
		return nil, err
	}
	pl.rep.Lower = lrep
	pl.phase("lower", t0, fmt.Sprintf("%d modules, %s", lrep.Modules, pl.src.choiceName()))
	p.Record.Rules = ruleCounts(pl.applied)
	switch {
	case fallback != "":
		pl.rep.Notes = append(pl.rep.Notes, fallback)
		p.Record.Notes = append(p.Record.Notes, fallback)
	case pl.opts.NoOptimize:
		p.Record.Notes = append(p.Record.Notes, "e-graph optimisation off (NoOptimize): functions lowered as written")
	}
	if pl.src.selects() {
		if note := weightsNote(pl.m, pl.fns, winners, pl.static, lrep, pl.lowerOptions()); note != "" {
			pl.rep.Notes = append(pl.rep.Notes, note)
			p.Record.Notes = append(p.Record.Notes, note)
		}
	}
	pl.src.record(p, pl.rep)
	return p, nil
}

// lowerOptions are the options every lowering of this compile shares (inline weights, the fold
// cache, the source's device).
func (pl *pipeline) lowerOptions() lower.Options {
	t := pl.src.target()
	return lower.Options{Caps: t.Caps, Device: t.Device, CompilerVersion: CompilerVersion(), Folds: pl.folds}
}

func joinNotes(notes []string) string {
	s := ""
	for i, n := range notes {
		if i > 0 {
			s += "; "
		}
		s += n
	}
	return s
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
