package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/importer"
)

func init() {
	register(&command{
		name:    "tune",
		usage:   "(model.yaml|model.gguf|model.onnx [--dim NAME=VALUE] [-budget D] [-f fn,...] [-device D] | -list | -clear) [-tune-db PATH]",
		short:   "tune a model's kernels on the device into the tuning database, or show or clear the database",
		example: "vkc tune examples/tinyllama/model.yaml -budget 30s",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			dims := dimFlags(fs)
			prec := precisionFlags(fs)
			list := fs.Bool("list", false, "list the database's searches: device, compiler, template, problem, best configuration and time")
			clear := fs.Bool("clear", false, "remove the database, so the next compile measures every kernel again")
			path := fs.String("tune-db", "", "the tuning database file (default: vkc/tune/tune.json in the user cache directory)")
			budget := fs.Duration("budget", 0, "with a model: stop measuring after this long (0: no limit); the rest keeps the static choice")
			fns := fs.String("f", "", "with a model: comma-separated functions whose kernels to tune (default: all)")
			device := fs.String("device", "", "with a model: the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			perSearch := fs.Duration("per-search", 0, "with a model: stop each template's search after this long (0: no limit); a later run resumes it")
			configs := fs.Int("configs", 0, "with a model: at most this many configurations measured per template (default: the tuner's, 64 points in full or 32 of a larger space)")
			asWritten := fs.Bool("as-written", false, "with a model: tune the functions as written, without e-graph optimisation")
			quiet := fs.Bool("q", false, "no progress on standard error")
			force := fs.Bool("force", false, "write (or with -clear, remove) a -tune-db file that is not a tuning database")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				modes := 0
				for _, on := range []bool{*list, *clear, len(args) > 0} {
					if on {
						modes++
					}
				}
				if modes != 1 || len(args) > 1 {
					return usagef("want one model.yaml, -list or -clear")
				}
				switch {
				case *clear:
					return tuneClear(stdout, *path, *force)
				case *list:
					return tuneList(stdout, *path)
				}
				stderr := fs.Output()
				if *quiet {
					stderr = io.Discard
				}
				for _, d := range []struct {
					flag string
					v    time.Duration
				}{{"-budget", *budget}, {"-per-search", *perSearch}} {
					if d.v < 0 {
						return usagef("%s %v: want a positive duration (or 0: no limit)", d.flag, d.v)
					}
				}
				opts := tuneModelOptions{db: *path, budget: *budget, perSearch: *perSearch, device: *device, configs: *configs, optimize: !*asWritten, force: *force, dims: dims, prec: *prec}
				if *fns != "" {
					opts.functions = strings.Split(*fns, ",")
				}
				return tuneModel(stdout, stderr, args[0], opts)
			}
		},
	})
}

type tuneModelOptions struct {
	db, device string
	functions  []string
	budget     time.Duration
	perSearch  time.Duration
	configs    int
	optimize   bool
	force      bool
	dims       dimFlag
	prec       importer.Precision
}

// tuneModel tunes every kernel of the model's functions (vkc.TuneKernels) and prints what
// tuning gained over the static choice per kernel. The plan is not written: a later vkc compile
// reuses the searches.
func tuneModel(stdout, stderr io.Writer, path string, o tuneModelOptions) error {
	ctx, stop := interruptible()
	defer stop()
	m, err := loadModel(path, false, o.dims, o.prec)
	if err != nil {
		return err
	}
	pp := newProgressPrinter(stderr)
	opts := vkc.TuneKernelsOptions{TuneDB: o.db, Device: o.device, Functions: o.functions, Budget: o.budget,
		PerSearch: o.perSearch, Configs: o.configs, AsWritten: !o.optimize, Force: o.force,
		Warn: func(s string) { pp.done(); fmt.Fprintf(stderr, "warning: %s\n", s) },
		Progress: func(p vkc.TuneProgress) {
			if !pp.tty {
				return
			}
			left := ""
			if p.Deadline {
				left = fmt.Sprintf(", %v left", p.TimeLeft.Round(time.Second))
			}
			fmt.Fprintf(pp.w, "\r  %d kernels tuned (%d reused), %d configurations tried%s   ", p.Kernels, p.Reused, p.Configs, left)
			pp.open = true
		}}
	if os.Getenv("VKC_TUNE_TRACE") != "" {
		opts.Trace = tuneTrace()
	}
	fmt.Fprintf(stderr, "tune %s\n", m.Name)
	start := time.Now()
	rep, err := vkc.TuneKernels(ctx, m, opts)
	pp.done()
	if rep == nil {
		return err
	}
	fmt.Fprintf(stdout, "%s on %s (database %s) in %v\n", rep.Summary, rep.DeviceName, rep.TuneDB, time.Since(start).Round(time.Millisecond))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "gain\tstatic\ttime\ttuned\ttime\tproblem")
	for _, g := range rep.Gains {
		gain, st := "-", "-"
		if g.Ratio() > 0 {
			gain = fmt.Sprintf("×%.2f", g.Ratio())
		}
		if g.StaticTime > 0 {
			st = g.StaticTime.Round(100 * time.Nanosecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", gain, g.Static, st, g.Tuned, g.TunedTime.Round(100*time.Nanosecond), g.Problem)
	}
	tw.Flush()
	if ctx.Err() != nil {
		return errors.New("interrupted: the searches completed so far are saved")
	}
	return err
}

func tuneClear(w io.Writer, path string, force bool) error {
	cleared, n, err := vkc.ClearTuningDB(path, force)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "cleared %s (%d entries)", cleared, n)
	if path != "" && path != cleared {
		fmt.Fprintf(w, " through %s", path)
	}
	fmt.Fprintln(w)
	return nil
}

func tuneList(w io.Writer, path string) error {
	db, err := vkc.ReadTuningDB(path)
	if err != nil {
		return err
	}
	if db.Warning != "" {
		fmt.Fprintf(os.Stderr, "vkc tune: warning: %s\n", db.Warning)
	}
	es := db.Searches
	fmt.Fprintf(w, "%s: %d searches\n", db.Path, len(es))
	var group vkc.TuningSearch
	var tw *tabwriter.Writer
	flush := func() {
		if tw != nil {
			tw.Flush()
		}
	}
	for i, e := range es {
		if i == 0 || e.Device != group.Device || e.Driver != group.Driver || e.Compiler != group.Compiler {
			flush()
			group = e
			fmt.Fprintf(w, "\ndevice %s, driver %s, %s\n", e.Device, e.Driver, e.Compiler)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  template\tbest\ttime\ttried\tinvalid\tstate\tproblem")
		}
		best, t := "none valid", "-"
		if e.Tried == 0 {
			best = "not measured"
		}
		if e.Best != "" {
			best, t = "["+e.Best+"]", e.Time.Round(100*time.Nanosecond).String()
		}
		state := "complete"
		switch {
		case !e.Complete && e.Budget > 0:
			state = fmt.Sprintf("cut by a %v budget", e.Budget)
		case !e.Complete:
			state = "interrupted"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\n", e.Template, best, t, e.Tried, e.Invalid, state, e.Problem)
	}
	flush()
	if len(db.Selections) > 0 {
		fmt.Fprintf(w, "\n%d measured selections\n", len(db.Selections))
	}
	for _, s := range db.Selections {
		state := "complete"
		switch {
		case !s.Complete && s.Budget > 0:
			state = fmt.Sprintf("cut by a %v budget: taken as it stands by a compile of that budget or less, measured again by a larger one", s.Budget)
		case !s.Complete:
			state = "interrupted: measured again by the next compile"
		}
		at := ""
		if s.Short > 0 && s.Rounds > 0 {
			at = fmt.Sprintf(" (each at %s=%d and %d)", s.Dim, s.Short, s.Capacity)
		}
		fmt.Fprintf(w, "\nfunction %s (graph %s) on device %s, driver %s, %s: %d candidates, %d paired rounds%s, %s\n",
			s.Function, s.Graph, s.Device, s.Driver, s.Compiler, len(s.Candidates), s.Rounds, at, state)
		if s.Why != "" {
			fmt.Fprintf(w, "  %s\n", s.Why)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "    \tmeasured\tratio\tweights\tcandidate")
		for i, c := range s.Candidates {
			mark, med, ratio := " ", "-", "-"
			if i == s.Winner {
				mark = "*"
			}
			if c.Median > 0 {
				med, ratio = c.Median.Round(time.Microsecond).String(), fmt.Sprintf("×%.3f", c.Ratio)
			}
			if s.Short > 0 && c.ShortMedian > 0 {
				med += fmt.Sprintf(" (at %d: %v)", s.Short, c.ShortMedian.Round(time.Microsecond))
				ratio += fmt.Sprintf(" (×%.3f)", c.ShortRatio)
			}
			label := c.Label
			if !c.Valid {
				label += " (rejected: " + c.Reason + ")"
			}
			fmt.Fprintf(tw, "  %s %d\t%s\t%s\t%s\t%s\n", mark, i, med, ratio, byteSize(c.Weights), label)
		}
		tw.Flush()
	}
	return nil
}
