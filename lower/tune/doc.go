// Package tune is vkc's generic kernel tuner, its database, and the measured selection of whole
// programs (DESIGN.md, "Choosing the graph after tuning, not before").
//
// One Tuner searches any kernel template's declared space (kernels.Space) without knowing which
// op the template serves: small spaces in full, large ones by a seeded budgeted search (random
// samples, then hill climbing over neighbouring parameter values). Each configuration is built,
// run on the device on random inputs of the problem's real shape (integer operands get valid
// values, see Inputs), compared with the reference interpreter, and only then timed through a
// TimingSource (DeviceTiming: runtime.Program.Measure; tests use a fake clock). A configuration
// that fails to build, to create its pipeline, or to compute the right result is recorded as
// invalid and never chosen. Pipelines are created once per distinct module and specialization
// (Pipelines), and configurations that realise the same launch share one measurement.
//
// Results go into a DB keyed by device fingerprint, driver, compiler version, template and
// problem key, written atomically; a recompile reuses completed searches, resumes interrupted
// ones, and says how many it reused (Tuner.Summary).
//
// # Wiring
//
// The compile driver (with --budget, --no-tune, --tune-db, --report) calls:
//
//	d, _ := runtime.Open(runtime.Options{Device: opts.Device})
//	db, _ := tune.OpenDB(opts.TuneDB)               // "" is the user cache directory; db.Warning if it was corrupt
//	model := lower.ModelFor(d.DeviceFingerprint())
//	t := &tune.Tuner{Device: d, DB: db, Compiler: vkc.CompilerVersion(),
//		Static: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) { return lower.StaticChoice(p, caps, model) }}
//	defer t.Close()
//	tctx, cancel := context.WithTimeout(ctx, opts.Budget) // one deadline for every problem
//
//	// extraction by measured cost (rules.Options.Cost), k diverse candidates per function:
//	price := t.OpCost(tctx)
//	cost := rules.CostFunc(func(n rules.CostNode) float64 {
//		if d, ok := price(n.Op, n.Attrs, n.Args, n.Outs); ok { return d.Seconds() * bytesPerSecond }
//		return rules.DefaultCost.Cost(n)
//	})
//	cands, _, _ := rules.OptimizeK(ctx, m, f, rules.Options{Cost: cost}, 4)
//
//	// measured selection per function, then the final plan from the winners:
//	lowerFn := func(fns []*ir.Function) (*plan.Plan, error) {
//		p, _, err := lower.Lower(m, fns, lower.Options{..., Choose: t.Choose(tctx)}); return p, err }
//	cands := func(f *ir.Function) ([]tune.SelectCandidate, error) { /* OptimizeK's graphs, cheapest first */ }
//	winners, sels, _ := tune.SelectFunctions(tctx, d, m, fns, cands, lowerFn, tune.SelectOptions{})
//	p, rep, _ := lower.Lower(m, winners, lower.Options{..., Choose: t.Choose(tctx)})
//	for _, s := range sels { p.Record.Candidates = append(p.Record.Candidates, s.Record()...) }
//	p.Record.Candidates = append(p.Record.Candidates, t.Record()...)
//	db.Save()                                      // also after Ctrl-C: completed searches are kept
//	report: t.Summary(), t.Gains(), each Selection.String()
//
// When the context ends (budget spent or Ctrl-C), the tuner stops measuring at once: a problem
// keeps the best configuration measured so far, or gets the Static choice when none was; Choose
// does not fail because of the context, so the caller decides from ctx.Err() whether to write a
// plan.
package tune
