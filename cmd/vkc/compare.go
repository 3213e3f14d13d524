package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/vkc-project/vkc/engine"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
)

func init() {
	register(&command{
		name:    "compare",
		usage:   "A.plan B.plan -f NAME [--length N] [--pairs N] [--json]",
		short:   "time one function of two plans of a model in alternating pairs (A then B, then B then A, …): B's wins, the median of B's time over A's, and each plan's median",
		example: "vkc compare static.plan tuned.plan -f prefill --length 128 --pairs 40",
		flagsOut: func(fs *flag.FlagSet, stdout io.Writer) func(args []string) error {
			fn := fs.String("f", "", "the function to time (required)")
			length := fs.Int("length", 0, "for a function with a run-time length: run it at this length (default: the capacity)")
			pairs := fs.Int("pairs", 40, "paired rounds: each times A and B once, in alternating order")
			reps := fs.Int("n", 7, "repetitions per timing (one submission, after 2 warm-up runs; its median is the timing)")
			jsonOut := fs.Bool("json", false, "print the results as JSON")
			device := fs.String("device", "", "the device, by index or name substring (default: $VKC_DEVICE, else the best)")
			return func(args []string) error {
				args, err := positional(fs, args)
				if err != nil {
					return err
				}
				if len(args) != 2 {
					return usagef("want two plan files, got %d arguments", len(args))
				}
				if *fn == "" {
					return usagef("-f NAME (the function to time) is required")
				}
				if *pairs < 1 || *reps < 1 || *length < 0 {
					return usagef("--pairs %d, -n %d, --length %d: want positive counts", *pairs, *reps, *length)
				}
				return compareCmd(stdout, args[0], args[1], engine.Options{Device: *device}, *fn, *length, *pairs, *reps, *jsonOut)
			}
		},
	})
}

// compareResult is what vkc compare measured.
type compareResult struct {
	A        string `json:"a_plan"`
	B        string `json:"b_plan"`
	Function string `json:"function"`
	Length   int    `json:"length,omitempty"`
	Device   string `json:"device"`
	Pairs    int    `json:"pairs"`
	// AMedian and BMedian are the medians of each plan's GPU times; Ratio the median over the
	// pairs of B's time over A's (below 1: B is faster), Cut 1 − Ratio; BWins the pairs in
	// which B was faster.
	AMedian int64   `json:"a_median_ns"`
	BMedian int64   `json:"b_median_ns"`
	Ratio   float64 `json:"ratio"`
	Cut     float64 `json:"cut"`
	BWins   int     `json:"b_wins"`
	// Ratios are the per-pair ratios, in order.
	Ratios []float64 `json:"ratios"`
}

// compareCmd times fn of plans a and b (the same model's: they take the same inputs) in pairs,
// alternating which runs first so that drift (clocks, heat, other processes) falls on both alike;
// each timing is the median GPU time of one submission of reps runs after two warm-up runs.
func compareCmd(w io.Writer, a, b string, lo engine.Options, fn string, length, pairs, reps int, jsonOut bool) error {
	pa, err := plan.ReadFile(a)
	if err != nil {
		return err
	}
	pb, err := plan.ReadFile(b)
	if err != nil {
		return err
	}
	fa, err := engine.FindFunction(pa, fn)
	if err != nil {
		return usagef("%s: %v", a, err)
	}
	fb, err := engine.FindFunction(pb, fn)
	if err != nil {
		return usagef("%s: %v", b, err)
	}
	if sa, sb := engine.Signature(fa.Inputs), engine.Signature(fb.Inputs); sa != sb {
		return fmt.Errorf("function %s takes (%s) in %s but (%s) in %s: not two plans of one function", fn, sa, a, sb, b)
	}
	fill, err := benchFill(fa, fn, length)
	if err != nil {
		return err
	}
	in, err := readPlanInputs(fa, nil, fill)
	if err != nil {
		return err
	}
	ma, err := engine.Load(a, lo)
	if err != nil {
		return err
	}
	defer ma.Close()
	mb, err := engine.Load(b, lo)
	if err != nil {
		return err
	}
	defer mb.Close()
	ctx, stop := interruptible()
	defer stop()
	opts := runtime.MeasureOptions{Warmup: 2, Reps: reps, MaxRounds: 1}
	res := &compareResult{A: a, B: b, Function: fn, Length: length, Device: ma.Device.Info.Name, Pairs: pairs}
	var ta, tb []time.Duration
	for i := 0; i < pairs; i++ {
		order := []*engine.Model{ma, mb}
		if i%2 == 1 {
			order = []*engine.Model{mb, ma}
		}
		var got [2]time.Duration
		for _, m := range order {
			t, err := m.Measure(ctx, fn, in, opts)
			if err != nil {
				return err
			}
			if m == ma {
				got[0] = t.Median
			} else {
				got[1] = t.Median
			}
		}
		ta, tb = append(ta, got[0]), append(tb, got[1])
		r := float64(got[1]) / float64(max(got[0], 1))
		res.Ratios = append(res.Ratios, r)
		if got[1] < got[0] {
			res.BWins++
		}
	}
	res.AMedian, res.BMedian = int64(medianDur(ta)), int64(medianDur(tb))
	rs := append([]float64(nil), res.Ratios...)
	sort.Float64s(rs)
	if n := len(rs); n%2 == 1 {
		res.Ratio = rs[n/2]
	} else {
		res.Ratio = (rs[n/2-1] + rs[n/2]) / 2
	}
	res.Cut = 1 - res.Ratio
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(w, "%s on %s, %d alternating pairs of %d runs each\n", fn, res.Device, pairs, reps)
	fmt.Fprintf(w, "  A %s: median %v\n", a, time.Duration(res.AMedian))
	fmt.Fprintf(w, "  B %s: median %v\n", b, time.Duration(res.BMedian))
	fmt.Fprintf(w, "  B faster in %d of %d pairs; B/A median ratio %.3f (cut %.1f%%)\n", res.BWins, pairs, res.Ratio, 100*res.Cut)
	return nil
}

func medianDur(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
