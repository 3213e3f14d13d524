package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vkc-project/vkc"
	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/internal/cputime"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/roofline"
	"github.com/vkc-project/vkc/runtime"
)

func init() {
	register(&command{
		name:    "bench",
		usage:   "plan.bin (-f NAME [-n reps] [--length N] [--input name=VALUE...] | --pp N,... [--tg N] [-r reps]) [--json]",
		short:   "time a function of a plan (GPU and wall time, GFLOP/s, roofline %, a per-kernel table), or a language model's prompt and generation throughput in tokens/s with the share of it spent on the device",
		example: "vkc bench tinyllama.plan --pp 16,64 --tg 32",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			fn := fs.String("f", "", "the function to time")
			n := fs.Int("n", 20, "with -f: timed repetitions")
			var inputs multiFlag
			fs.Var(&inputs, "input", "with -f: NAME=VALUE as for vkc run; inputs not given are zero integers (token ids, positions) and random floats in [-1, 1]")
			length := fs.Int("length", 0, "with -f, for a function with a run-time length: run it at this length (bounded inputs not given get this many rows; default: the capacity)")
			pp := fs.String("pp", "", "prompt lengths (comma-separated): prompt tokens/s through the plan's prefill and decode functions, as engine.Generate runs a prompt")
			tg := fs.String("tg", "", "generation lengths (comma-separated): generated tokens/s, greedy decode steps from position 0")
			reps := fs.Int("r", 5, "with --pp/--tg: repetitions per test, after warm-up runs (at least one, and at least 0.3 s of them)")
			jsonOut := fs.Bool("json", false, "print the results as JSON")
			peaks := fs.Bool("peaks", true, "with -f: rate the run against the device's bandwidth and f32 peak, measured by vkc on the device once and cached")
			remeasure := fs.Bool("remeasure-peaks", false, "measure the device's peaks again instead of reading the cache")
			peaksDir := fs.String("peaks-cache", "", "the folder of the peaks cache (default: the user cache folder's vkc/peaks)")
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
				lo := engine.Options{Device: *device, AllowForeign: *foreign, LoadProgress: weightsProgress(fs.Output())}
				if *pp != "" || *tg != "" {
					if *fn != "" || len(inputs) > 0 || *length != 0 {
						return usagef("--pp and --tg time whole prompts and generations; they take no -f or --input (nor --length)")
					}
					pps, err := parseLengths("--pp", *pp)
					if err != nil {
						return err
					}
					tgs, err := parseLengths("--tg", *tg)
					if err != nil {
						return err
					}
					if *reps < 1 {
						return usagef("-r %d: want at least 1", *reps)
					}
					return throughputCmd(stdout, args[0], lo, pps, tgs, *reps, *jsonOut)
				}
				if *fn == "" {
					return usagef("-f NAME (the function to time) or --pp/--tg is required")
				}
				if *n < 1 {
					return usagef("-n %d: want at least 1", *n)
				}
				if *length < 0 {
					return usagef("--length %d: want a positive length", *length)
				}
				pk := peakOptions{use: *peaks, remeasure: *remeasure, dir: *peaksDir}
				return benchCmd(stdout, args[0], lo, *fn, *n, *length, inputs, pk, *jsonOut)
			}
		},
	})
}

func parseLengths(flagName, s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, usagef("%s %q: want positive token counts, comma-separated", flagName, s)
		}
		out = append(out, v)
	}
	return out, nil
}

// benchFill is benchInput's random inputs for function fn (f) of a plan, the fixed seed's; at a
// run-time length (length > 0) its bounded inputs hold that many rows' worth (k rows a unit of
// the length), after checking that f has a length and length lies within it.
func benchFill(f *plan.Function, fn string, length int) (func(*plan.Value) ([]byte, error), error) {
	fill := benchInput(rand.New(rand.NewPCG(1, 2)))
	if length <= 0 {
		return fill, nil
	}
	if f.Length == nil {
		return nil, usagef("--length %d: function %s has no run-time length", length, fn)
	}
	if length < int(f.Length.Min) || length > int(f.Length.Max) {
		return nil, usagef("--length %d: function %s runs for %s in %d..%d", length, fn, f.Length.Name, f.Length.Min, f.Length.Max)
	}
	return func(v *plan.Value) ([]byte, error) {
		if !v.Bounded {
			return fill(v)
		}
		w, err := v.WithRows(v.Shape[0] / int64(f.Length.Max) * int64(length)) // k rows per unit
		if err != nil {
			return nil, err
		}
		return fill(&w)
	}, nil
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

type peakOptions struct {
	use, remeasure bool
	dir            string
}

// timing is a measurement in nanoseconds, for the JSON output.
type timing struct {
	Median int64   `json:"median_ns"`
	P10    int64   `json:"p10_ns"`
	P90    int64   `json:"p90_ns"`
	Spread float64 `json:"spread"`
	Noisy  bool    `json:"noisy,omitempty"`
	Host   bool    `json:"host_timed,omitempty"`
}

// rates are achieved throughput and, when the peaks are known, the shares of them.
type rates struct {
	FLOPs       float64  `json:"flops"`
	Bytes       float64  `json:"bytes"`
	FLOPsPerS   float64  `json:"flops_per_s"`
	BytesPerS   float64  `json:"bytes_per_s"`
	BandwidthPc *float64 `json:"bandwidth_pct,omitempty"` // of Peaks.Bandwidth
	ArithPc     *float64 `json:"arith_pct,omitempty"`     // of Peaks.F32 (or CoopMatrix)
}

func rate(flops, bytes float64, t time.Duration, pk *roofline.Peaks, coop bool) rates {
	r := rates{FLOPs: flops, Bytes: bytes}
	if t <= 0 {
		return r
	}
	r.FLOPsPerS, r.BytesPerS = flops/t.Seconds(), bytes/t.Seconds()
	if pk != nil {
		if pk.Bandwidth > 0 {
			v := 100 * r.BytesPerS / pk.Bandwidth
			r.BandwidthPc = &v
		}
		peak := pk.F32
		if coop {
			peak = pk.CoopMatrix
		}
		if peak > 0 && flops > 0 {
			v := 100 * r.FLOPsPerS / peak
			r.ArithPc = &v
		}
	}
	return r
}

type kernelRow struct {
	Kernel string  `json:"kernel"`
	Ops    string  `json:"ops,omitempty"`
	Calls  int     `json:"calls"`
	Time   int64   `json:"time_ns"`
	Share  float64 `json:"share"`
	// BoundBytes says that the plan recorded no work for these dispatches, so Bytes is the sum
	// of their bound ranges (an upper bound for kernels that touch part of a range).
	BoundBytes bool  `json:"bound_bytes,omitempty"`
	CoopMatrix bool  `json:"coopmat,omitempty"`
	Rates      rates `json:"rates"`
}

// stats is runtime.Stats with JSON names.
type stats struct {
	Dispatches int `json:"dispatches"`
	Barriers   int `json:"barriers"`
	Intervals  int `json:"intervals"`
	Copies     int `json:"staging_copies"`
}

type benchResult struct {
	Plan       string           `json:"plan"`
	Model      string           `json:"model"`
	Compiler   string           `json:"compiler"`
	Function   string           `json:"function"`
	Device     string           `json:"device"`
	Reps       int              `json:"reps"`
	Inputs     map[string]int64 `json:"scalar_inputs,omitempty"`
	Length     int64            `json:"length,omitempty"`
	Variant    string           `json:"variant,omitempty"` // the lengths of the variant that ran, if one did
	GPU        timing           `json:"gpu"`
	Wall       timing           `json:"wall"`
	CPU        *timing          `json:"cpu,omitempty"` // the process's CPU time per run (absent where unknown)
	Stats      stats            `json:"stats"`
	WorkKnown  bool             `json:"work_known"`
	Achieved   rates            `json:"achieved"` // the function's work over the GPU median
	Peaks      *roofline.Peaks  `json:"peaks,omitempty"`
	PeaksFrom  string           `json:"peaks_from,omitempty"`
	ProfileSum int64            `json:"profile_total_ns"`
	Kernels    []kernelRow      `json:"kernels"`
}

func toTiming(m runtime.Measurement) timing {
	return timing{Median: int64(m.Median), P10: int64(m.P10), P90: int64(m.P90), Spread: m.Spread, Noisy: m.Noisy, Host: m.HostTimed}
}

func benchCmd(w io.Writer, path string, lo engine.Options, fn string, reps, length int, given []string, pk peakOptions, jsonOut bool) error {
	p, err := plan.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := engine.FindFunction(p, fn)
	if err != nil {
		return usagef("%v", err)
	}
	fill, err := benchFill(f, fn, length)
	if err != nil {
		return err
	}
	in, err := readPlanInputs(f, given, fill)
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
		v := &f.Outputs[i]
		b, _ := v.Bytes()
		if v.Bounded && f.Length != nil {
			// A run at length n returns the n rows.
			rb, _ := v.RowBytes(f.Length.Max)
			b = rb * uint64(runLength(f, in))
		}
		out[v.Name] = make([]byte, b)
	}
	// CPU time: what the process spent per run, its threads together (on a CPU device such as
	// lavapipe that is the device's work, and it does not count time other processes took).
	var wall, cpu []time.Duration
	for i := 0; i < reps+2; i++ {
		t0, c0 := time.Now(), cputime.Process()
		if err := l.RunInto(ctx, fn, in, out); err != nil {
			return err
		}
		if i >= 2 {
			wall = append(wall, time.Since(t0))
			cpu = append(cpu, cputime.Process()-c0)
		}
	}
	gpu, err := l.Measure(ctx, fn, in, runtime.MeasureOptions{Reps: reps})
	if err != nil {
		return err
	}
	times, st, err := l.Profile(ctx, fn, in)
	if err != nil {
		return err
	}
	res := &benchResult{Plan: path, Model: p.Model, Compiler: p.CompilerVersion, Function: fn, Device: l.Device.Info.Name, Reps: reps,
		GPU: toTiming(gpu), Stats: stats{st.Dispatches, st.Barriers, st.Intervals, st.Copies}}
	wm, wlo, whi := quantiles(wall)
	res.Wall = timing{Median: int64(wm), P10: int64(wlo), P90: int64(whi), Spread: spread(wm, wlo, whi)}
	if cm, clo, chi := quantiles(cpu); cm > 0 {
		res.CPU = &timing{Median: int64(cm), P10: int64(clo), P90: int64(chi), Spread: spread(cm, clo, chi)}
	}

	if pk.use {
		peaks, cached, ppath, warn, err := peaksFor(ctx, l.Device, pk, jsonOut)
		if err != nil {
			return err
		}
		if warn != nil {
			fmt.Fprintf(os.Stderr, "vkc bench: %v\n", warn)
		}
		res.Peaks = peaks
		res.PeaksFrom = "measured now"
		if cached {
			res.PeaksFrom = "cached in " + ppath
		} else if ppath != "" && warn == nil {
			res.PeaksFrom = "measured now, cached in " + ppath
		}
	}

	// The work of this run: scalar inputs and the run-time length as the run had them.
	scalars := map[uint32]int64{}
	for i := range f.Inputs {
		v := &f.Inputs[i]
		b := in[v.Name]
		if len(v.Shape) == 0 && len(b) == 4 && (v.DType == plan.I32 || v.DType == plan.U32) {
			x := int64(int32(binary.LittleEndian.Uint32(b)))
			if v.DType == plan.U32 {
				x = int64(binary.LittleEndian.Uint32(b))
			}
			scalars[uint32(i)] = x
			if res.Inputs == nil {
				res.Inputs = map[string]int64{}
			}
			res.Inputs[v.Name] = x
		}
	}
	n := runLength(f, in)
	res.Length = n
	// A run at length n may run a variant compiled for a smaller capacity: its dispatches are
	// what ran and what the profile indexes.
	ran, err := l.RunsAt(fn, int(n))
	if err != nil {
		return err
	}
	if f.Length != nil && ran.Length != nil && ran.Length.Max < f.Length.Max {
		res.Variant = fmt.Sprintf("%d..%d", ran.Length.Min, ran.Length.Max)
	}
	var totalF, totalB float64
	for i := range ran.Dispatches {
		d := &ran.Dispatches[i]
		if d.Work.Known() {
			res.WorkKnown = true
		}
		fl, b, _ := d.Work.At(n, func(i uint32) int64 { return scalars[i] })
		totalF += fl
		totalB += b
	}
	if res.WorkKnown {
		res.Achieved = rate(totalF, totalB, gpu.Median, res.Peaks, false)
	}
	res.Kernels, res.ProfileSum = kernelRows(p, ran, times, n, scalars, res.Peaks)
	if jsonOut {
		return writeJSON(w, res)
	}
	printBench(w, res)
	return nil
}

// runLength is the run-time length n of a run with inputs in (0 for a function without one):
// the rows its bounded inputs carry, as the runtime derives it.
func runLength(f *plan.Function, in map[string][]byte) int64 {
	if f.Length == nil {
		return 0
	}
	for i := range f.Inputs {
		v := &f.Inputs[i]
		if !v.Bounded {
			continue
		}
		if rb, err := v.RowBytes(f.Length.Max); err == nil && rb > 0 {
			return int64(uint64(len(in[v.Name])) / rb)
		}
	}
	return int64(f.Length.Max)
}

func peaksFor(ctx context.Context, d *runtime.Device, pk peakOptions, quiet bool) (*roofline.Peaks, bool, string, error, error) {
	path, _ := roofline.CachePath(pk.dir, d.Info.Fingerprint)
	if !quiet {
		if _, err := os.Stat(path); err != nil || pk.remeasure {
			fmt.Fprintf(os.Stderr, "vkc bench: measuring %s's bandwidth and f32 peak (once per device; cached in %s)\n", d.Info.Name, path)
		}
	}
	return roofline.Cached(ctx, d, pk.dir, pk.remeasure, roofline.Options{})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printBench(w io.Writer, r *benchResult) {
	fmt.Fprintf(w, "%s of %s on %s, %d repetitions\n", r.Function, r.Model, r.Device, r.Reps)
	d := func(ns int64) time.Duration { return time.Duration(ns) }
	noisy := ""
	if r.GPU.Noisy {
		noisy += " (noisy)"
	}
	if r.GPU.Host {
		noisy += " (no timestamps: host-timed)"
	}
	fmt.Fprintf(w, "  GPU time   median %-10v p10 %-10v p90 %-10v spread %.1f%%%s\n",
		d(r.GPU.Median), d(r.GPU.P10), d(r.GPU.P90), 100*r.GPU.Spread, noisy)
	fmt.Fprintf(w, "  wall time  median %-10v p10 %-10v p90 %-10v spread %.1f%%\n",
		d(r.Wall.Median), d(r.Wall.P10), d(r.Wall.P90), 100*r.Wall.Spread)
	if c := r.CPU; c != nil {
		fmt.Fprintf(w, "  CPU time   median %-10v p10 %-10v p90 %-10v spread %.1f%% (this process, all threads: the work of a CPU device)\n",
			d(c.Median), d(c.P10), d(c.P90), 100*c.Spread)
	}
	fmt.Fprintf(w, "  %d dispatches, %d barriers, %d barrier intervals, %d staging copies per run\n",
		r.Stats.Dispatches, r.Stats.Barriers, r.Stats.Intervals, r.Stats.Copies)
	if r.WorkKnown {
		at := ""
		if len(r.Inputs) > 0 || r.Length > 0 {
			var parts []string
			for k, v := range r.Inputs {
				parts = append(parts, fmt.Sprintf("%s=%d", k, v))
			}
			sort.Strings(parts)
			if r.Length > 0 {
				if r.Variant != "" {
					parts = append(parts, fmt.Sprintf("length %d (on the variant for %s)", r.Length, r.Variant))
				} else {
					parts = append(parts, fmt.Sprintf("length %d", r.Length))
				}
			}
			at = " at " + strings.Join(parts, ", ")
		}
		a := r.Achieved
		fmt.Fprintf(w, "  work       %sFLOP, %s moved per run%s\n", si(a.FLOPs), sizeOf(a.Bytes), at)
		fmt.Fprintf(w, "  achieved   %s, %s over the GPU median%s\n", roofline.Rate(a.FLOPsPerS, "FLOP/s"), roofline.Rate(a.BytesPerS, "B/s"), shares(a))
	} else {
		fmt.Fprintf(w, "  work       not recorded in this plan (compiled by %q): no GFLOP/s or roofline\n", r.Compiler)
	}
	if r.Peaks != nil {
		fmt.Fprintf(w, "  peaks      %s (measured by vkc on this device %s; %s)\n", r.Peaks, r.Peaks.When.Format("2006-01-02"), r.PeaksFrom)
	}
	fmt.Fprintf(w, "\nper kernel (one profiled run, dispatches serialised: %v in all)\n", d(r.ProfileSum))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "time\tshare\tcalls\tGB/s\tGFLOP/s\t%%BW\t%%FLOP\t  kernel\n")
	for _, k := range r.Kernels {
		gbs, gfl := "-", "-"
		if k.Time > 0 {
			gbs = fmt.Sprintf("%.3g", k.Rates.BytesPerS/1e9)
			if k.BoundBytes {
				gbs += "*"
			}
			if k.Rates.FLOPs > 0 {
				gfl = fmt.Sprintf("%.3g", k.Rates.FLOPsPerS/1e9)
			}
		}
		pct := func(p *float64) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprintf("%.1f", *p)
		}
		label := k.Kernel
		if k.Ops != "" && !strings.HasPrefix(k.Kernel, k.Ops) {
			label += " (" + k.Ops + ")"
		}
		fmt.Fprintf(tw, "%v\t%.1f%%\t%d\t%s\t%s\t%s\t%s\t  %s\n", d(k.Time).Round(100*time.Nanosecond), k.Share, k.Calls, gbs, gfl,
			pct(k.Rates.BandwidthPc), pct(k.Rates.ArithPc), label)
	}
	tw.Flush()
	bound := false
	for _, k := range r.Kernels {
		bound = bound || k.BoundBytes
	}
	if bound {
		fmt.Fprintln(w, "* bytes of the bound ranges: the plan records no work for these dispatches")
	}
	if r.Peaks != nil {
		io.WriteString(w, "%BW and %FLOP: shares of the device's copy bandwidth and f32 multiply-add rate above\n")
	}
}

func shares(a rates) string {
	var s []string
	if a.BandwidthPc != nil {
		s = append(s, fmt.Sprintf("%.1f%% of the bandwidth", *a.BandwidthPc))
	}
	if a.ArithPc != nil {
		s = append(s, fmt.Sprintf("%.1f%% of the f32 peak", *a.ArithPc))
	}
	if len(s) == 0 {
		return ""
	}
	return ": " + strings.Join(s, ", ")
}

// si writes x with an SI prefix and a trailing space: "1.23 G".
func si(x float64) string {
	for _, u := range []struct {
		f float64
		p string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if x >= u.f {
			return fmt.Sprintf("%.3g %s", x/u.f, u.p)
		}
	}
	return fmt.Sprintf("%.3g ", x)
}

func sizeOf(b float64) string {
	const k = 1024
	switch {
	case b >= k*k*k:
		return fmt.Sprintf("%.2f GiB", b/(k*k*k))
	case b >= k*k:
		return fmt.Sprintf("%.2f MiB", b/(k*k))
	case b >= k:
		return fmt.Sprintf("%.2f KiB", b/k)
	}
	return fmt.Sprintf("%.0f B", b)
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

// kernelRows aggregates the profiled dispatches by kernel (module): count, GPU time, share of
// the profiled run, and the work the plan records for them at this run's scalars (or, for a
// plan that records none, the bytes they bind: every bound byte once, read-write twice; exact
// for streaming kernels, an upper bound where a kernel touches part of a range).
func kernelRows(p *plan.Plan, f *plan.Function, times []runtime.DispatchTime, n int64, scalars map[uint32]int64, pk *roofline.Peaks) ([]kernelRow, int64) {
	type acc struct {
		row          kernelRow
		time         time.Duration
		flops, bytes float64
	}
	rows := map[uint32]*acc{}
	var total time.Duration
	for _, t := range times {
		if t.Index < 0 || t.Index >= len(f.Dispatches) {
			continue
		}
		d := &f.Dispatches[t.Index]
		r := rows[d.Module]
		if r == nil {
			key := fmt.Sprintf("module %d", d.Module)
			coop := false
			if int(d.Module) < len(p.Modules) {
				key = p.Modules[d.Module].Key
				coop = roofline.UsesCoopMatrix(p.Modules[d.Module].SPIRV)
			}
			r = &acc{row: kernelRow{Kernel: key, Ops: strings.Join(d.Ops, "+"), CoopMatrix: coop}}
			rows[d.Module] = r
		}
		r.row.Calls++
		r.time += t.Time
		total += t.Time
		if d.Work.Known() {
			fl, b, _ := d.Work.At(n, func(i uint32) int64 { return scalars[i] })
			r.flops += fl
			r.bytes += b
		} else {
			r.bytes += float64(max(t.Bytes, 0))
			r.row.BoundBytes = true
		}
	}
	list := make([]kernelRow, 0, len(rows))
	for _, r := range rows {
		r.row.Time = int64(r.time)
		if total > 0 {
			r.row.Share = 100 * float64(r.time) / float64(total)
		}
		r.row.Rates = rate(r.flops, r.bytes, r.time, pk, r.row.CoopMatrix)
		list = append(list, r.row)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Time != list[j].Time {
			return list[i].Time > list[j].Time
		}
		return list[i].Kernel < list[j].Kernel
	})
	return list, int64(total)
}

// tput is one throughput test, in llama-bench's terms.
type tput struct {
	Model     string    `json:"model"`
	Plan      string    `json:"plan"`
	Device    string    `json:"device"`
	SizeBytes uint64    `json:"size_bytes"`
	Params    uint64    `json:"params"`
	Test      string    `json:"test"` // pp512, tg128
	NPrompt   int       `json:"n_prompt"`
	NGen      int       `json:"n_gen"`
	Reps      int       `json:"reps"`
	MedianTS  float64   `json:"median_ts"`
	MeanTS    float64   `json:"avg_ts"`
	StddevTS  float64   `json:"stddev_ts"`
	SamplesNS []int64   `json:"samples_ns"`
	SamplesTS []float64 `json:"samples_ts"`
	// DeviceNS is the device time of each sample's runs (runtime.Executable.DeviceTime: from
	// each run's first command to its last; 0 on a device without timestamps): a sample's
	// wall time less it is what the host, the submissions and the waits cost.
	DeviceNS []int64 `json:"device_ns"`
	Via      string  `json:"via"` // how the tokens went through the plan's functions
	// Device memory with the plan loaded: what the plan needs (plan.DeviceMemory), what the
	// device allocated, and the heap's budget and usage (VK_EXT_memory_budget; 0 without it).
	PlanDeviceBytes uint64 `json:"plan_device_bytes"`
	AllocatedBytes  uint64 `json:"allocated_bytes"`
	HeapBudget      uint64 `json:"heap_budget"`
	HeapUsage       uint64 `json:"heap_usage"`
}

// deviceShare says how much of a test's wall time its runs spent on the device (the median
// sample's share, and the median times a token), "" on a device without timestamps.
func deviceShare(r tput) string {
	var shares []float64
	var dev, wall []time.Duration
	for i, d := range r.DeviceNS {
		if d <= 0 || r.SamplesNS[i] <= 0 {
			return ""
		}
		shares = append(shares, float64(d)/float64(r.SamplesNS[i]))
		dev, wall = append(dev, time.Duration(d)), append(wall, time.Duration(r.SamplesNS[i]))
	}
	if len(shares) == 0 {
		return ""
	}
	share, _, _ := medianMeanSD(shares)
	n := time.Duration(max(r.NPrompt, r.NGen))
	return fmt.Sprintf("; on the device %.0f%% of the time (medians: %v of %v a token)", 100*share,
		(medianDur(dev) / n).Round(time.Microsecond), (medianDur(wall) / n).Round(time.Microsecond))
}

// throughputCmd measures prompt processing (pp: a prompt of N tokens through the plan from
// position 0, as engine.Generate runs it, up to and including the first generated token) and
// warmUp is how long the warm-up runs of vkc bench --pp/--tg last at least (throughputCmd).
const warmUp = 300 * time.Millisecond

// generation (tg: N greedy decode steps from position 0), each reps times after warm-up runs,
// and prints tokens per second the way llama-bench does.
func throughputCmd(w io.Writer, path string, lo engine.Options, pps, tgs []int, reps int, jsonOut bool) error {
	p, err := plan.ReadFile(path)
	if err != nil {
		return err
	}
	lm, err := engine.CausalLM(p)
	if err != nil {
		return fmt.Errorf("%s: --pp and --tg need a causal language model: %w", path, err)
	}
	for _, n := range append(append([]int(nil), pps...), tgs...) {
		if lm.Context > 0 && n > lm.Context {
			return usagef("%d tokens do not fit the plan's KV cache of %d positions", n, lm.Context)
		}
	}
	vocab := lm.Decode.Vocab
	if vocab == 0 {
		vocab = tokenRange(lm.Decode)
	}
	m, err := engine.Load(path, lo)
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, stop := interruptible()
	defer stop()
	var size, params uint64
	for _, t := range p.Weights.Tensors {
		size += t.Size
		e := uint64(1)
		for _, d := range t.Shape {
			e *= uint64(d)
		}
		params += e
	}
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			if vocab > 0 {
				ids[i] = int32(rng.IntN(vocab))
			}
		}
		return ids
	}
	room := m.Device.Room()
	if !jsonOut {
		fmt.Fprintf(os.Stderr, "vkc bench: device memory: the plan needs %s, the device allocated %s; with it loaded %s\n",
			sizeOf(float64(p.DeviceMemory().Total())), sizeOf(float64(room.Own)), room)
	}
	var results []tput
	run := func(test string, np, ng int) error {
		r := tput{Model: p.Model, Plan: path, Device: m.Device.Info.Name, SizeBytes: size, Params: params,
			Test: test, NPrompt: np, NGen: ng, Reps: reps,
			PlanDeviceBytes: p.DeviceMemory().Total(), AllocatedBytes: room.Own, HeapBudget: room.Budget, HeapUsage: room.Usage}
		// Warm-up runs: at least one, and until warmUp has passed (at most 20): an idle GPU runs
		// at low clocks for the first tenths of a second (an H200 at 345 MHz: pp512 of a 1B
		// model took 118 and 69 ms, then 37 ms, so a median of three after one warm-up was 69).
		start, warm := time.Now(), 0
		for len(r.SamplesNS) < reps {
			var g *engine.Generation
			var err error
			var took time.Duration
			m.CountDeviceTime()
			if np > 0 {
				g, err = m.GenerateIDs(ctx, tokens(np), engine.GenerateOptions{MaxTokens: 1}, nil)
				if err == nil {
					took = g.Prompt
					r.Via = via(g, np)
				}
			} else {
				g, err = m.GenerateIDs(ctx, tokens(1), engine.GenerateOptions{MaxTokens: ng}, nil)
				if err == nil {
					took = g.Prompt
					for _, s := range g.Steps {
						took += s
					}
					r.Via = fmt.Sprintf("%s ×%d", g.DecodeFn, ng)
				}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", test, err)
			}
			if warm == 0 || warm < 20 && time.Since(start) < warmUp {
				warm++
				continue
			}
			r.SamplesNS = append(r.SamplesNS, int64(took))
			r.SamplesTS = append(r.SamplesTS, float64(max(np, ng))/took.Seconds())
			r.DeviceNS = append(r.DeviceNS, int64(m.DeviceTime()))
		}
		r.MedianTS, r.MeanTS, r.StddevTS = medianMeanSD(r.SamplesTS)
		results = append(results, r)
		if !jsonOut {
			fmt.Fprintf(os.Stderr, "vkc bench: %s: %.2f ± %.2f t/s%s\n", test, r.MedianTS, r.StddevTS, deviceShare(r))
		}
		return nil
	}
	for _, n := range pps {
		if err := run(fmt.Sprintf("pp%d", n), n, 0); err != nil {
			return err
		}
	}
	for _, n := range tgs {
		if err := run(fmt.Sprintf("tg%d", n), 0, n); err != nil {
			return err
		}
	}
	if jsonOut {
		return writeJSON(w, results)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "| model\t| size\t| params\t| device\t| test\t| t/s\t| via\t|\n")
	fmt.Fprintf(tw, "| ---\t| ---:\t| ---:\t| ---\t| ---:\t| ---:\t| ---\t|\n")
	for _, r := range results {
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t| %s\t| %s\t| %.2f ± %.2f\t| %s\t|\n", r.Model, sizeOf(float64(r.SizeBytes)),
			strings.TrimSpace(si(float64(r.Params))), r.Device, r.Test, r.MedianTS, r.StddevTS, r.Via)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nt/s: median ± standard deviation of %d repetitions after warm-up runs (at least one and 0.3 s); wall time as engine.Generate sees it.\n", reps)
	fmt.Fprintln(w, "pp N: N random prompt tokens from position 0, up to the first generated token; tg N: N greedy decode steps from position 0.")
	return nil
}

// tokenRange is the number of token ids the step function's tokens input accepts, from the
// plan's input ranges (0 when the plan records none).
func tokenRange(s *engine.Step) int {
	for i, v := range s.Function.Inputs {
		if v.Name != s.Tokens {
			continue
		}
		for _, r := range s.Function.Ranges {
			if int(r.Input) == i && len(r.Plus) == 0 && r.Max != plan.NoMax && r.Max >= 0 && r.Max < math.MaxInt32 {
				return int(r.Max) + 1
			}
		}
	}
	return 0
}

// via says how a prompt of n tokens went through the plan: "prefill ×8", "prefill ×6 + decode ×4".
func via(g *engine.Generation, n int) string {
	var parts []string
	if g.Prefilled > 0 {
		parts = append(parts, fmt.Sprintf("%s: %d tokens", g.PrefillFn, g.Prefilled))
	}
	if rest := n - g.Prefilled; rest > 0 {
		parts = append(parts, fmt.Sprintf("%s: %d tokens one at a time", g.DecodeFn, rest))
	}
	return strings.Join(parts, ", ")
}

// medianMeanSD is the median, mean and (sample) standard deviation of xs.
func medianMeanSD(xs []float64) (median, mean, sd float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	for _, x := range s {
		mean += x
	}
	mean /= float64(len(s))
	if len(s) > 1 {
		for _, x := range s {
			sd += (x - mean) * (x - mean)
		}
		sd = math.Sqrt(sd / float64(len(s)-1))
	}
	return median, mean, sd
}
