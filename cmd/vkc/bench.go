package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

func init() {
	register(&command{
		name:    "bench",
		usage:   "plan.bin -f NAME [-n reps] [--input name=VALUE...]",
		short:   "time a function of a plan: GPU and wall time per run (median, spread), dispatches, barriers, and a per-kernel table",
		example: "vkc bench tinyllama.plan -f decode -n 50 --input pos=16",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			fn := fs.String("f", "", "the function to time (required)")
			n := fs.Int("n", 20, "timed repetitions")
			var inputs multiFlag
			fs.Var(&inputs, "input", "NAME=VALUE as for vkc run; inputs not given are zero integers (token ids, positions) and random floats in [-1, 1]")
			device := fs.String("device", "", "the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			foreign := fs.Bool("allow-foreign", false, "run a plan compiled for another device")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return usagef("want one plan file, got %d arguments", len(args))
				}
				if *fn == "" {
					return usagef("-f NAME (the function to time) is required")
				}
				if *n < 1 {
					return usagef("-n %d: want at least 1", *n)
				}
				return benchCmd(stdout, args[0], engine.Options{Device: *device, AllowForeign: *foreign}, *fn, *n, inputs)
			}
		},
	})
}

// benchInput makes an input not given on the command line: integers 0 (a valid token id and
// position for every model), floats uniform in [-1, 1] from a fixed seed.
func benchInput(rng *rand.Rand) func(v *plan.Value) ([]byte, error) {
	return func(v *plan.Value) ([]byte, error) {
		t, err := vkc.ValueType(v)
		if err != nil {
			return nil, err
		}
		x := ir.NewTensor(t)
		if t.DType.IsFloat() {
			for j := 0; j < x.NumElements(); j++ {
				x.SetFloat64(j, 2*rng.Float64()-1)
			}
		}
		return x.Data, nil
	}
}

func benchCmd(w io.Writer, path string, lo engine.Options, fn string, reps int, given []string) error {
	p, err := plan.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := engine.FindFunction(p, fn)
	if err != nil {
		return usagef("%v", err)
	}
	in, err := readPlanInputs(f, given, benchInput(rand.New(rand.NewPCG(1, 2))))
	if err != nil {
		return err
	}
	l, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer l.Close()
	ctx, stop := interruptible()
	defer stop()

	// Wall time: whole runs as an embedding program sees them (write inputs, submit, wait, read
	// outputs), after two warm-up runs.
	out := map[string][]byte{}
	for i := range f.Outputs {
		b, _ := f.Outputs[i].Bytes()
		out[f.Outputs[i].Name] = make([]byte, b)
	}
	var wall []time.Duration
	for i := 0; i < reps+2; i++ {
		t0 := time.Now()
		if err := l.RunInto(ctx, fn, in, out); err != nil {
			return err
		}
		if i >= 2 {
			wall = append(wall, time.Since(t0))
		}
	}
	gpu, err := l.Measure(ctx, fn, in, runtime.MeasureOptions{Reps: reps})
	if err != nil {
		return err
	}
	times, stats, err := l.Profile(ctx, fn, in)
	if err != nil {
		return err
	}

	fmt.Fprintf(w, "%s of %s on %s, %d repetitions\n", fn, p.Model, l.Device.Info.Name, reps)
	wm, wlo, whi := quantiles(wall)
	fmt.Fprintf(w, "  GPU time   median %-10v p10 %-10v p90 %-10v spread %.1f%%%s\n",
		gpu.Median, gpu.P10, gpu.P90, 100*gpu.Spread, noisy(gpu))
	fmt.Fprintf(w, "  wall time  median %-10v p10 %-10v p90 %-10v spread %.1f%%\n",
		wm, wlo, whi, 100*spread(wm, wlo, whi))
	fmt.Fprintf(w, "  %d dispatches, %d barriers, %d barrier intervals, %d staging copies per run\n",
		stats.Dispatches, stats.Barriers, stats.Intervals, stats.Copies)
	return kernelTable(w, p, f, times)
}

func noisy(m runtime.Measurement) string {
	s := ""
	if m.Noisy {
		s += " (noisy)"
	}
	if m.HostTimed {
		s += " (no timestamps: host-timed)"
	}
	return s
}

func quantiles(ds []time.Duration) (med, p10, p90 time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(f float64) time.Duration { return s[int(f*float64(len(s)-1)+0.5)] }
	return q(0.5), q(0.1), q(0.9)
}

func spread(med, lo, hi time.Duration) float64 {
	if med <= 0 {
		return 0
	}
	return float64(hi-lo) / float64(med)
}

// kernelTable aggregates the profiled dispatches by kernel (module): count, GPU time, share of
// the profiled run, and achieved bandwidth over the bytes the dispatches bind (the runtime's
// DispatchTime.Bytes: every bound byte once, read-write twice; exact for streaming kernels, an
// upper bound where a kernel touches part of a range, e.g. attention over a partly filled KV
// cache). The plan records no FLOP counts, so the GFLOP/s column stays "-" until it does.
func kernelTable(w io.Writer, p *plan.Plan, f *plan.Function, times []runtime.DispatchTime) error {
	type row struct {
		key   string
		ops   string
		count int
		time  time.Duration
		bytes uint64
	}
	rows := map[uint32]*row{}
	var total time.Duration
	for _, t := range times {
		if t.Index < 0 || t.Index >= len(f.Dispatches) {
			continue
		}
		d := &f.Dispatches[t.Index]
		r := rows[d.Module]
		if r == nil {
			key := fmt.Sprintf("module %d", d.Module)
			if int(d.Module) < len(p.Modules) {
				key = p.Modules[d.Module].Key
			}
			r = &row{key: key, ops: strings.Join(d.Ops, "+")}
			rows[d.Module] = r
		}
		r.count++
		r.time += t.Time
		total += t.Time
		r.bytes += uint64(max(t.Bytes, 0))
	}
	list := make([]*row, 0, len(rows))
	for _, r := range rows {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].time != list[j].time {
			return list[i].time > list[j].time
		}
		return list[i].key < list[j].key
	})
	fmt.Fprintf(w, "\nper kernel (one profiled run, dispatches serialised: %v in all)\n", total)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "time\tshare\tcalls\tGB/s\tGFLOP/s\t  kernel\n")
	for _, r := range list {
		share := 0.0
		if total > 0 {
			share = 100 * float64(r.time) / float64(total)
		}
		gbs := "-"
		if r.time > 0 {
			gbs = fmt.Sprintf("%.3g", float64(r.bytes)/r.time.Seconds()/1e9)
		}
		label := r.key
		if r.ops != "" && !strings.HasPrefix(r.key, r.ops) {
			label += " (" + r.ops + ")"
		}
		fmt.Fprintf(tw, "%v\t%.1f%%\t%d\t%s\t%s\t  %s\n", r.time.Round(100*time.Nanosecond), share, r.count, gbs, "-", label)
	}
	return tw.Flush()
}
