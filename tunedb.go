package vkc

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/lower"
	"github.com/vkc-project/vkc/lower/tune"
	"github.com/vkc-project/vkc/rules"
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
	Complete bool // false: cut short
	// Budget, for an incomplete search, is the budget of the compile whose deadline cut it: a
	// compile of no larger budget takes it as it stands, a larger one (or vkc tune) resumes it.
	// 0: cancelled; the next compile resumes it.
	Budget time.Duration
}

// TuningDB is what a tuning database file holds, for listing.
type TuningDB struct {
	Path string
	// Warning is set when the file exists but cannot be used (corrupt, another format); the
	// listing is then empty.
	Warning  string
	Searches []TuningSearch // sorted by device, driver, compiler, template, problem
	// Selections are the recorded measured selections of whole functions, sorted by device,
	// driver, compiler and function.
	Selections []TuningSelection
}

// TuningSelection is one recorded measured selection: a function (by its graph) on one
// device, its candidates and the winner. A warm compile takes it instead of measuring.
type TuningSelection struct {
	Device, Driver, Compiler string
	Function                 string
	Graph                    string // the key of the function's graph as written (abbreviated)
	Candidates               []TuningCandidate
	Winner                   int // index into Candidates
	Rounds                   int
	Complete                 bool          // false: the budget cut it short
	Budget                   time.Duration // for an incomplete one: as TuningSearch.Budget
	Why                      string        // how the winner was decided when not by time alone
	// Short is the run-time length the rounds also timed (0: none) beside the capacity
	// Capacity of the length named Dim.
	Short, Capacity int
	Dim             string
}

// TuningCandidate is one candidate of a recorded selection.
type TuningCandidate struct {
	Label   string
	Valid   bool
	Reason  string
	Median  time.Duration
	Ratio   float64 // its time over the winner's, median of the paired rounds
	Weights uint64  // the weight bytes of its plan
	// ShortMedian and ShortRatio are Median and Ratio at TuningSelection.Short.
	ShortMedian time.Duration
	ShortRatio  float64
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
			Problem: e.Problem, Time: e.Time, Tried: e.Tried, Invalid: len(e.Invalid), Complete: e.Complete, Budget: e.Budget}
		if e.Best != nil {
			s.Best = e.Best.Key()
		}
		out.Searches = append(out.Searches, s)
	}
	for _, e := range db.Selections() {
		g := e.Graph
		if len(g) > 12 {
			g = g[:12]
		}
		ts := TuningSelection{Device: e.Device, Driver: e.Driver, Compiler: e.Compiler, Function: e.Function, Graph: g,
			Winner: e.Winner, Rounds: e.Rounds, Complete: e.Complete, Budget: e.Budget, Why: e.Why,
			Short: e.Short, Capacity: e.Capacity, Dim: e.Dim}
		for _, c := range e.Candidates {
			ts.Candidates = append(ts.Candidates, TuningCandidate{Label: c.Label, Valid: c.Valid, Reason: c.Reason,
				Median: c.Median, Ratio: c.Ratio, Weights: c.Weights, ShortMedian: c.ShortMedian, ShortRatio: c.ShortRatio})
		}
		out.Selections = append(out.Selections, ts)
	}
	return out, nil
}

// ClearTuningDB removes the tuning database at path ("" is the user cache directory's), so the
// next compile measures every kernel again. It refuses to remove a file that is not a tuning
// database unless force. It returns the file's path and how many entries (searches and
// selections) it held.
func ClearTuningDB(path string, force bool) (string, int, error) {
	if path == "" {
		p, err := tune.DefaultPath()
		if err != nil {
			return "", 0, err
		}
		path = p
	}
	// Through a symbolic link, the database is the file it leads to: that is what is cleared
	// (and named), not the link.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	n, err := tune.ClearDB(path, force)
	return path, n, err
}

// TuneKernelsOptions configure TuneKernels.
type TuneKernelsOptions struct {
	TuneDB    string   // the tuning database ("" is the user cache directory's)
	Force     bool     // replace a TuneDB file that is not a tuning database
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
// with Options.Tune reuses the searches. It is the compile pipeline up to the tuning of the
// kernels that will run, for the static extraction only: the candidates' kernels are listed by
// lowering it with static choices (the functions as written when it needs a missing template),
// tuned cheapest first with a fair share of the budget each, and the database is saved, also
// when ctx is cancelled (then it returns what was done with ctx's error).
func TuneKernels(ctx context.Context, m *ir.Model, o TuneKernelsOptions) (*TuneKernelsReport, error) {
	fns, err := selectFunctions(m, o.Functions)
	if err != nil {
		return nil, err
	}
	opts := Options{Device: o.Device, TuneDB: o.TuneDB, ForceTuneDB: o.Force, Budget: o.Budget, TuneTrace: o.Trace, NoOptimize: o.AsWritten}
	rep := &Report{Model: m.Name}
	progress := func(Progress) {}
	pl := &pipeline{m: m, fns: fns, opts: opts, rep: rep, progress: progress, folds: lower.NewFoldCache(),
		phase: func(string, time.Time, string) {}}
	src, err := newMeasureSource(ctx, m, fns, measureConfig{configs: o.Configs, perSearch: o.PerSearch}, opts, rep, progress)
	if err != nil {
		return nil, err
	}
	pl.src = src
	if o.Progress != nil {
		src.tu.Progress = func(p tune.Progress) {
			o.Progress(TuneProgress{Kernels: p.Kernels, Reused: p.Reused, Configs: p.Configs, TimeLeft: p.TimeLeft, Deadline: p.Deadline})
		}
	}
	out := &TuneKernelsReport{Model: m.Name, DeviceName: src.info.Name, TuneDB: src.db.Path()}
	err = pl.survey(ctx)
	if err != nil && ctx.Err() == nil {
		// The optimiser failed (a rule bug, a limit): tune the functions as written.
		rep.Notes = append(rep.Notes, fmt.Sprintf("%v; tuning the functions as written", err))
		pl.opts.NoOptimize, pl.static, err = true, map[*ir.Function]*staticExtraction{}, nil
	}
	if err == nil {
		err = pl.extract(ctx)
	}
	if err == nil {
		err = pl.priceLowering(ctx)
	}
	// Saving the database is what TuneKernels is for: completed searches are kept, also when
	// interrupted, and a failed save is the error.
	src.close(rep)
	if err == nil {
		err = src.saveErr
	}
	for _, n := range rep.Notes {
		if o.Warn != nil {
			o.Warn(n)
		}
	}
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	out.Summary = src.tu.Summary()
	for _, g := range src.tu.Gains() {
		out.Gains = append(out.Gains, KernelGain{Problem: g.Problem, Static: g.Static, Tuned: g.Tuned, StaticTime: g.StaticTime, TunedTime: g.TunedTime})
	}
	return out, ctx.Err()
}

// OptimizeFunction returns f as the e-graph optimiser extracts it under the static cost model
// (what Compile lowers on its static path); each node a rule introduced carries the rule's name
// in ir.Node.Rule. m need not have its weights loaded.
func OptimizeFunction(ctx context.Context, m *ir.Model, f *ir.Function) (*ir.Function, error) {
	g, _, err := rules.Optimize(ctx, m, f, rules.Options{})
	return g, err
}
