package main

import (
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/roofline"
	"github.com/vkc-project/vkc/runtime"
)

// fakePeaks writes a peaks cache for the default device with round figures, so that bench's
// shares can be checked exactly without measuring (roofline's own tests measure).
func fakePeaks(t *testing.T) string {
	t.Helper()
	d, err := runtime.Open(runtime.Options{CacheDir: "off"})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	defer d.Close()
	dir := t.TempDir()
	path, err := roofline.CachePath(dir, d.Info.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	p := roofline.Peaks{Device: d.Info.Name, Fingerprint: d.Info.Fingerprint.String(), Method: roofline.Method,
		Bandwidth: 1e9, F32: 1e10, CopyBytes: 1 << 20, When: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	b, _ := json.Marshal(p)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBenchWorkAndRoofline benches tinyllama's decode at two positions with --json: the work
// grows by the attention's per-key FLOPs (2·(hd+hd)·heads per key and layer, counted here from
// the model's dimensions) times the extra keys, and the shares are the achieved rates over the
// cached peaks.
func TestBenchWorkAndRoofline(t *testing.T) {
	path := tinyllamaPlan(t)
	peaks := fakePeaks(t)
	flops := map[string]float64{}
	for _, pos := range []string{"16", "100"} {
		code, stdout, stderr := runCLI(t, "bench", path, "-f", "decode", "-n", "3", "--input", "pos="+pos, "--json", "--peaks-cache", peaks)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var r benchResult
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("--json output does not parse: %v\n%s", err, stdout)
		}
		if !r.WorkKnown || r.Peaks == nil || r.Peaks.Bandwidth != 1e9 || !strings.HasPrefix(r.PeaksFrom, "cached in ") {
			t.Fatalf("pos %s: work known %v, peaks %+v from %q", pos, r.WorkKnown, r.Peaks, r.PeaksFrom)
		}
		a := r.Achieved
		if a.BandwidthPc == nil || a.ArithPc == nil ||
			math.Abs(*a.BandwidthPc-100*a.BytesPerS/1e9) > 1e-9 || math.Abs(*a.ArithPc-100*a.FLOPsPerS/1e10) > 1e-9 {
			t.Errorf("pos %s: shares %+v", pos, a)
		}
		if want := a.FLOPs / time.Duration(r.GPU.Median).Seconds(); math.Abs(a.FLOPsPerS-want) > 1e-6*want {
			t.Errorf("pos %s: %v FLOP/s, work over the GPU median is %v", pos, a.FLOPsPerS, want)
		}
		var kernelFlops float64
		for _, k := range r.Kernels {
			kernelFlops += k.Rates.FLOPs
			if k.BoundBytes {
				t.Errorf("kernel %s: bytes from bindings, the plan records work", k.Kernel)
			}
		}
		if math.Abs(kernelFlops-a.FLOPs) > 1e-9*a.FLOPs {
			t.Errorf("pos %s: kernels sum to %v FLOPs, the function %v", pos, kernelFlops, a.FLOPs)
		}
		flops[pos] = a.FLOPs
	}
	const layers, heads, hd = 2, 4, 16
	if got, want := flops["100"]-flops["16"], float64(layers*2*(hd+hd)*heads*(100-16)); got != want {
		t.Errorf("decode at pos 100 does %v more FLOPs than at 16, want %v", got, want)
	}
	// The text form prints the GFLOP/s and roofline columns.
	code, stdout, stderr := runCLI(t, "bench", path, "-f", "decode", "-n", "3", "--peaks-cache", peaks)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"work       ", "achieved   ", "of the bandwidth", "peaks      copy 1 GB/s, f32 fma 10 GFLOP/s"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
	// The columns are right-aligned to their widest value, so a %BW of 101.8 widens the gap
	// before the header's %BW.
	if !regexp.MustCompile(`GFLOP/s +%BW +%FLOP`).MatchString(stdout) {
		t.Errorf("bench output lacks the GFLOP/s, %%BW and %%FLOP columns:\n%s", stdout)
	}
}

// TestBenchThroughput: --pp and --tg time prompts and generations the way engine.Generate runs
// them (a 20-token prompt on tinyllama's 16-token prefill: one prefill, 4 decode steps), with
// the device time of each sample's runs.
func TestBenchThroughput(t *testing.T) {
	path := tinyllamaPlan(t)
	d, err := runtime.Open(runtime.Options{CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	timestamps := d.Info.Caps.Timestamps
	d.Close()
	code, stdout, stderr := runCLI(t, "bench", path, "--pp", "16,20", "--tg", "4", "-r", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rs []tput
	if err := json.Unmarshal([]byte(stdout), &rs); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, stdout)
	}
	want := []struct {
		test   string
		np, ng int
		via    string
	}{
		{"pp16", 16, 0, "prefill: 16 tokens"},
		{"pp20", 20, 0, "prefill: 20 tokens"}, // one run of the run-time-length prefill
		{"tg4", 0, 4, "decode ×4"},
	}
	if len(rs) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(rs), len(want), stdout)
	}
	for i, w := range want {
		r := rs[i]
		if r.Test != w.test || r.NPrompt != w.np || r.NGen != w.ng || r.Via != w.via || r.Reps != 2 || len(r.SamplesTS) != 2 || r.MedianTS <= 0 || r.Params != 125248 {
			t.Errorf("result %d: %+v, want %s (%d prompt, %d generated, via %q, 2 samples, 125248 parameters)", i, r, w.test, w.np, w.ng, w.via)
		}
		for j, ns := range r.SamplesNS {
			if ts := float64(max(w.np, w.ng)) / time.Duration(ns).Seconds(); math.Abs(ts-r.SamplesTS[j]) > 1e-6*ts {
				t.Errorf("%s sample %d: %v t/s for %v", r.Test, j, r.SamplesTS[j], time.Duration(ns))
			}
		}
		// Each sample's device time lies inside its wall time (5% for the two clocks), and is
		// there wherever the device has timestamps.
		if len(r.DeviceNS) != len(r.SamplesNS) {
			t.Errorf("%s: %d device times for %d samples", r.Test, len(r.DeviceNS), len(r.SamplesNS))
			continue
		}
		for j, d := range r.DeviceNS {
			if d < 0 || float64(d) > 1.05*float64(r.SamplesNS[j]) || timestamps && d == 0 {
				t.Errorf("%s sample %d: device time %v, wall time %v", r.Test, j, time.Duration(d), time.Duration(r.SamplesNS[j]))
			}
		}
	}
	code, stdout, _ = runCLI(t, "bench", path, "--pp", "16", "-r", "1")
	if code != 0 || !strings.Contains(stdout, "| pp16 |") || !strings.Contains(stdout, "| model ") {
		t.Errorf("table: exit %d:\n%s", code, stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pp", "200"}, "200 tokens do not fit the plan's KV cache of 128 positions"},
		{[]string{"--pp", "16", "-f", "decode"}, "they take no -f or --input"},
		{[]string{"--tg", "0"}, "want positive token counts"},
		{[]string{}, "-f NAME (the function to time) or --pp/--tg is required"},
	} {
		code, _, stderr := runCLI(t, append([]string{"bench", path}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
