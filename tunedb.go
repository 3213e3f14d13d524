package vkc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/rules"
	"github.com/vkc-project/vkc/runtime"
)

// TuningSearch is one kernel search of the tuning database, as `vkc tune --list` shows it.
type TuningSearch struct {
	Device, Driver, Compiler string // what the search was measured on and by
	Template, Problem        string
	// Best is the fastest valid configuration ("wg=64,per_thread=2"), "" when none was valid;
	// Time its median.
	Best     string
	Time     time.Duration
	Tried    int  // configurations built and run
	Invalid  int  // of which were rejected
	Complete bool // false: cut short by a budget, resumed by the next compile
}

// TuningDB is what a tuning database file holds, for listing.
type TuningDB struct {
	Path string
	// Warning is set when the file exists but cannot be used (corrupt, another format); the
	// listing is then empty.
	Warning  string
	Searches []TuningSearch // sorted by device, driver, compiler, template, problem
}

// ReadTuningDB reads the tuning database at path ("" is the user cache directory's). A missing
// file is an empty database.
func ReadTuningDB(path string) (*TuningDB, error) {
	db, err := tune.OpenDB(path)
	if err != nil {
		return nil, err
	}
	out := &TuningDB{Path: db.Path(), Warning: db.Warning}
	for _, e := range db.Entries() {
		s := TuningSearch{Device: e.Device, Driver: e.Driver, Compiler: e.Compiler, Template: e.Template,
			Problem: e.Problem, Time: e.Time, Tried: e.Tried, Invalid: len(e.Invalid), Complete: e.Complete}
		if e.Best != nil {
			s.Best = e.Best.Key()
		}
		out.Searches = append(out.Searches, s)
	}
	return out, nil
}

// ClearTuningDB removes the tuning database at path ("" is the user cache directory's), so the
// next compile measures every kernel again. It returns the file's path and how many searches
// it held.
func ClearTuningDB(path string) (string, int, error) {
	if path == "" {
		p, err := tune.DefaultPath()
		if err != nil {
			return "", 0, err
		}
		path = p
	}
	n, err := tune.ClearDB(path)
	return path, n, err
}

// TuneKernelsOptions configure TuneKernels.
type TuneKernelsOptions struct {
	TuneDB    string   // the tuning database ("" is the user cache directory's)
	Device    string   // as Options.Device
	Functions []string // the functions whose kernels to tune (empty: all)
	// Budget bounds all measuring (0: none); PerSearch each template's search (0: none; a later
	// run resumes it).
	Budget, PerSearch time.Duration
	// Configs caps the configurations measured per template (0: the tuner's default).
	Configs int
	// AsWritten tunes the functions as written, without e-graph optimisation.
	AsWritten bool
	// Trace receives a line per configuration run (as Options.TuneTrace).
	Trace io.Writer
	// Progress receives the tuner's progress; Warn the notes a person should see (a corrupt
	// database, a fallback to the functions as written).
	Progress func(TuneProgress)
	Warn     func(string)
}

// TuneProgress is one progress report of TuneKernels.
type TuneProgress struct {
	Kernels, Reused, Configs int
	TimeLeft                 time.Duration // meaningful when Deadline
	Deadline                 bool
}

// KernelGain is what tuning gained on one kernel problem over the static choice.
type KernelGain struct {
	Problem       string
	Static, Tuned string        // "template [config]"
	StaticTime    time.Duration // 0 when the static point was not measured
	TunedTime     time.Duration
}

// Ratio is StaticTime/TunedTime (0 when either is unknown).
func (g KernelGain) Ratio() float64 {
	if g.StaticTime <= 0 || g.TunedTime <= 0 {
		return 0
	}
	return float64(g.StaticTime) / float64(g.TunedTime)
}

// TuneKernelsReport says what TuneKernels did.
type TuneKernelsReport struct {
	Model, DeviceName, TuneDB string
	Summary                   string       // the tuner's one-line summary
	Gains                     []KernelGain // largest gain first
}

// TuneKernels measures the kernels of the model's functions (optimised as Compile optimises
// them, unless AsWritten) into the tuning database, without writing a plan: a later Compile
// with Options.Tune reuses the searches. It lowers the functions once with static choices to
// list the kernel problems, tunes them cheapest first with a fair share of the budget each, and
// saves the database, also when ctx is cancelled (then it returns ctx's error after saving).
func TuneKernels(ctx context.Context, m *ir.Model, o TuneKernelsOptions) (*TuneKernelsReport, error) {
	warn := func(s string) {
		if o.Warn != nil {
			o.Warn(s)
		}
	}
	fns, err := selectFunctions(m, o.Functions)
	if err != nil {
		return nil, err
	}
	written := fns
	if !o.AsWritten {
		var opt []*ir.Function
		for _, f := range fns {
			g, _, err := rules.Optimize(ctx, m, f, rules.Options{})
			if err != nil {
				warn(fmt.Sprintf("optimise %s: %v; tuning the functions as written", f.Name, err))
				opt = nil
				break
			}
			opt = append(opt, g)
		}
		if opt != nil {
			fns = opt
		}
	}
	d, err := runtime.Open(runtime.Options{Device: o.Device})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	db, err := tune.OpenDB(o.TuneDB)
	if err != nil {
		return nil, err
	}
	if db.Warning != "" {
		warn(db.Warning)
	}
	caps := tune.CapsOf(&d.Info)
	model := lower.ModelFor(d.DeviceFingerprint())
	tu := &tune.Tuner{Device: d, DB: db, Compiler: CompilerVersion(), Budget: o.Configs, Exhaustive: o.Configs,
		Static: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
			return lower.StaticChoice(p, caps, model)
		}, Trace: o.Trace, SearchLimit: o.PerSearch}
	if o.Progress != nil {
		tu.Progress = func(p tune.Progress) {
			o.Progress(TuneProgress{Kernels: p.Kernels, Reused: p.Reused, Configs: p.Configs, TimeLeft: p.TimeLeft, Deadline: p.Deadline})
		}
	}
	defer tu.Close()
	tctx := ctx
	if o.Budget > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, o.Budget)
		defer cancel()
	}
	rep := &TuneKernelsReport{Model: m.Name, DeviceName: d.Info.Name, TuneDB: db.Path()}
	// The kernels are the lowering's problems: list them with static choices, then tune them
	// cheapest first, each with a fair share of the budget (tune.Tuner.TuneAll).
	var probs []*kernels.Problem
	folds := lower.NewFoldCache()
	dry := lower.Options{Caps: caps, Device: d.DeviceFingerprint(), CompilerVersion: CompilerVersion(), Folds: folds,
		Choose: func(p *kernels.Problem) (*kernels.Template, kernels.Config, error) {
			probs = append(probs, p)
			return tu.Static(p)
		}}
	_, _, err = lower.Lower(m, fns, dry)
	if errors.Is(err, lower.ErrNoTemplate) && !o.AsWritten {
		warn(fmt.Sprintf("the optimised graph does not lower (%v); tuning the functions as written", err))
		fns, probs = written, nil
		_, _, err = lower.Lower(m, fns, dry)
	}
	if err == nil {
		tu.TuneAll(tctx, tune.ByEstimate(probs, tu.StaticEstimate(caps, func(l *kernels.Launch) time.Duration { return lower.Estimate(l, model) })))
		lopts := lower.Options{Caps: caps, Device: d.DeviceFingerprint(), CompilerVersion: CompilerVersion(), Choose: tu.Choose(tctx), Folds: folds}
		_, _, err = lower.Lower(m, fns, lopts)
	}
	// Completed searches are worth keeping even when lowering failed or was interrupted.
	if serr := db.Save(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	rep.Summary = tu.Summary()
	for _, g := range tu.Gains() {
		rep.Gains = append(rep.Gains, KernelGain{Problem: g.Problem, Static: g.Static, Tuned: g.Tuned, StaticTime: g.StaticTime, TunedTime: g.TunedTime})
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	return rep, nil
}

// OptimizeFunction returns f as the e-graph optimiser extracts it under the static cost model
// (what Compile lowers on its static path); each node a rule introduced carries the rule's name
// in ir.Node.Rule. m need not have its weights loaded.
func OptimizeFunction(ctx context.Context, m *ir.Model, f *ir.Function) (*ir.Function, error) {
	g, _, err := rules.Optimize(ctx, m, f, rules.Options{})
	return g, err
}
