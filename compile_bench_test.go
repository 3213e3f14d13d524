//go:build linux

package vkc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/safetensors"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/plan"
)

// BenchmarkCompileSmolLM2 measures the static compile of SmolLM2-135M (examples/smollm2-135m,
// 257 MB of f16 weights) for lavapipe, device-free, with its weights in a safetensors file as a
// real checkpoint would be (written once, before timing). Each round parses the model (the
// weights are memory-mapped), compiles both functions and writes the plan; it reports the
// medians of the compile (parse to plan in memory) and of the plan write (the weights copied
// into the file, fsync included) separately, and the peak RSS of the round against the weight
// bytes. Run it with -benchmem for the allocations.
//
//	go test -run '^$' -bench CompileSmolLM2 -benchmem -count 5 .
func BenchmarkCompileSmolLM2(b *testing.B) {
	benchCompile(b, filepath.Join("examples", "smollm2-135m", "model.yaml"), &LavapipeTarget)
}

// BenchmarkCompileLlama1B is BenchmarkCompileSmolLM2 for a Llama 3.2 1B shape (1.24 G
// parameters, 2.47 GB of random f16 weights, testdata/llama-1.2b): the static compile must stay
// within 2.5 GB of RSS, which holds only if the weights are never copied into memory. It compiles
// for the H200 (kernels.H200, device-free): the weights exceed lavapipe's 2 GiB allocation limit,
// and the point is the compiler's time and memory on the CI machine, not a run. It needs
// about 5.3 GB of free disk (the weights and the plan) and 4 GiB of available memory (to make the
// weights once); short of either it is skipped, saying which. CI runs it with -benchtime 1x.
func BenchmarkCompileLlama1B(b *testing.B) {
	h200 := Target{Caps: kernels.H200, Device: plan.Fingerprint{VendorID: 0x10de, DeviceID: 0x2335, DeviceName: "NVIDIA H200 (device-free target)"}}
	benchCompile(b, filepath.Join("testdata", "llama-1.2b", "model.yaml"), &h200)
}

func benchCompile(b *testing.B, model string, target *Target) {
	m, err := ir.ParseModelWith(model, ir.ParseOptions{SkipWeights: true})
	if err != nil {
		b.Fatal(err)
	}
	var weights uint64
	for _, d := range m.Params {
		weights += uint64(d.Type.Bytes())
	}
	dir := b.TempDir()
	if free, err := freeDisk(dir); err == nil && free < 2*weights+weights/8 {
		b.Skipf("%s needs %s of free disk in %s for its weights and its plan; there are %s", m.Name, size(2*weights+weights/8), dir, size(free))
	}
	if avail, err := availableMemory(); err == nil && avail < weights+weights/2+(1<<30) {
		b.Skipf("%s needs %s of available memory to make its random weights once; there are %s", m.Name, size(weights+weights/2+(1<<30)), size(avail))
	}
	path, err := writeFileModel(model, dir)
	if err != nil {
		b.Fatal(err)
	}
	planPath := filepath.Join(dir, "model.plan")
	var compiles, writes []time.Duration
	var peaks []uint64
	for b.Loop() {
		goruntime.GC()
		debug.FreeOSMemory()
		reset := resetPeakRSS() == nil
		t0 := time.Now()
		fm, err := ir.ParseModel(path)
		if err != nil {
			b.Fatal(err)
		}
		p, _, err := Compile(context.Background(), fm, Options{Target: target, ArgmaxOutput: true})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := p.WriteFile(planPath); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if peak, err := peakRSS(); err == nil && reset {
			peaks = append(peaks, peak)
		}
		fm.Close()
		compiles, writes = append(compiles, t1.Sub(t0)), append(writes, t2.Sub(t1))
	}
	b.ReportMetric(float64(median(compiles))/1e6, "compile-ms")
	b.ReportMetric(float64(median(writes))/1e6, "write-ms")
	if len(peaks) > 0 {
		slices.Sort(peaks)
		peak := peaks[len(peaks)/2]
		b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(peak)/float64(weights), "RSS/weights")
	} else {
		b.Log("peak RSS not measured: /proc/self/clear_refs cannot reset the high-water mark here")
	}
	b.ReportMetric(float64(weights)/(1<<20), "weights-MiB")
}

// writeFileModel makes the model's random weights once, writes them to a safetensors file in dir
// (as vkc check -write-weights does) and a copy of the model.yaml that reads them, and returns
// the copy's path. The random weights are dropped before it returns.
func writeFileModel(model, dir string) (string, error) {
	src, err := os.ReadFile(model)
	if err != nil {
		return "", err
	}
	m, err := ir.ParseModel(model)
	if err != nil {
		return "", err
	}
	if err := safetensors.Write(filepath.Join(dir, "weights.safetensors"), m.Weights); err != nil {
		return "", err
	}
	var out []string
	found := false
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "weights:") {
			line, found = "weights: {file: weights.safetensors}", true
		}
		out = append(out, line)
	}
	if !found {
		return "", fmt.Errorf("%s has no weights line to point at the file", model)
	}
	path := filepath.Join(dir, "model.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// resetPeakRSS resets the kernel's record of this process's peak RSS (Linux: writing 5 to
// /proc/self/clear_refs), so that peakRSS then measures one round, not the setup before it.
func resetPeakRSS() error { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is VmHWM, the peak resident set since the last reset, in bytes.
func peakRSS() (uint64, error) { return procField("/proc/self/status", "VmHWM:") }

// availableMemory is MemAvailable of /proc/meminfo in bytes.
func availableMemory() (uint64, error) { return procField("/proc/meminfo", "MemAvailable:") }

func procField(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

func freeDisk(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
