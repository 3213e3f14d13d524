// Package roofline measures what a Vulkan device can do — its memory bandwidth with a copy kernel
// and its f32 arithmetic with a multiply-add kernel, both built with codegen and checked on the
// device — caches the figures per device fingerprint, and rates a run's work against them: the
// share of the device's bandwidth and of its arithmetic peak that a kernel or a function reached.
//
// The peaks are what vkc's own code reaches on the device, not the vendor's data sheet: a copy
// that streams vec4 loads and stores (counting the bytes read and written), and independent
// chains of fused multiply-adds (2 FLOPs each) on enough invocations to fill the device. A
// kernel's "% of peak" is therefore against the best a simple kernel achieves there, and can
// exceed 100 % where caches serve a kernel's repeated reads (a small tensor).
//
// Limits: f32 arithmetic only; kernels built on cooperative matrices (tensor cores) need a peak
// of their own (Peaks.CoopMatrix, not measured yet: no cooperative-matrix kernel exists in codegen
// yet), and their arithmetic share is reported against nothing until it is.
package roofline

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/runtime"
)

// Method is the version of the measurement: a cached result of another method is measured
// again.
const Method = 1

// Peaks are a device's measured limits.
type Peaks struct {
	Device      string `json:"device"`
	Fingerprint string `json:"fingerprint"` // runtime.Fingerprint.String()
	Method      int    `json:"method"`
	// Bandwidth is bytes per second of the copy kernel, counting the bytes read and written;
	// CopyBytes the size of the buffer it copied.
	Bandwidth float64 `json:"bandwidth_bytes_per_s"`
	CopyBytes int64   `json:"copy_bytes"`
	// F32 is f32 FLOP per second of the multiply-add kernel (2 FLOPs per fma).
	F32 float64 `json:"f32_flops_per_s"`
	// CoopMatrix is the FLOP rate of cooperative-matrix multiply-adds; 0: not measured.
	CoopMatrix float64 `json:"coopmat_flops_per_s,omitempty"`
	// Spread is the larger of the two measurements' (p90-p10)/median; Noisy says one was noisy.
	Spread float64 `json:"spread"`
	Noisy  bool    `json:"noisy,omitempty"`
	// When is when the figures were measured.
	When time.Time `json:"measured_at"`
}

// String is "copy 3.97 TB/s, f32 FMA 51.2 TFLOP/s".
func (p *Peaks) String() string {
	s := fmt.Sprintf("copy %s, f32 fma %s", Rate(p.Bandwidth, "B/s"), Rate(p.F32, "FLOP/s"))
	if p.CoopMatrix > 0 {
		s += ", cooperative matrix " + Rate(p.CoopMatrix, "FLOP/s")
	}
	if p.Noisy {
		s += " (noisy)"
	}
	return s
}

// Rate writes x per second with an SI prefix: Rate(3.97e12, "B/s") is "3.97 TB/s".
func Rate(x float64, unit string) string {
	for _, u := range []struct {
		f float64
		p string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if x >= u.f {
			return fmt.Sprintf("%.3g %s%s", x/u.f, u.p, unit)
		}
	}
	return fmt.Sprintf("%.3g %s", x, unit)
}

// Options configure Measure.
type Options struct {
	// CopyBytes is the size of the copied buffer; 0 chooses: 1 GiB on a GPU (at most an
	// eighth of its largest device-local heap), 64 MiB on a CPU device, where a copy of
	// several times the caches is enough and larger ones take long.
	CopyBytes int64
	// MinTime is how long one timed repetition of the multiply-add kernel should take (its
	// iteration count doubles until it does); 0 chooses 2 ms on a GPU, 20 ms on a CPU device.
	MinTime time.Duration
}

// Measure runs the copy and the multiply-add kernels on d, checks their results, and returns the
// peaks. It takes about a second on a GPU and a few seconds on lavapipe.
func Measure(ctx context.Context, d *runtime.Device, o Options) (*Peaks, error) {
	cpu := d.Info.Type == runtime.CPU
	if o.CopyBytes <= 0 {
		o.CopyBytes = 64 << 20
		if !cpu {
			o.CopyBytes = 1 << 30
			for _, h := range d.Info.Memory.Heaps {
				if h.DeviceLocal && h.Size > 0 {
					o.CopyBytes = min(o.CopyBytes, int64(h.Size/8))
				}
			}
		}
	}
	o.CopyBytes = max(o.CopyBytes&^15, 1<<20)
	if o.MinTime <= 0 {
		o.MinTime = 2 * time.Millisecond
		if cpu {
			o.MinTime = 20 * time.Millisecond
		}
	}
	p := &Peaks{Device: d.Info.Name, Fingerprint: d.Info.Fingerprint.String(), Method: Method, CopyBytes: o.CopyBytes, When: time.Now().UTC().Truncate(time.Second)}
	bw, m1, err := measureCopy(ctx, d, o.CopyBytes)
	if err != nil {
		return nil, fmt.Errorf("measure %s: copy: %w", d.Info.Name, err)
	}
	flops, m2, err := measureFMA(ctx, d, cpu, o.MinTime)
	if err != nil {
		return nil, fmt.Errorf("measure %s: fma: %w", d.Info.Name, err)
	}
	p.Bandwidth, p.F32 = bw, flops
	p.Spread = max(m1.Spread, m2.Spread)
	p.Noisy = m1.Noisy || m2.Noisy
	return p, nil
}

// copyWG is the copy kernel's workgroup size.
const copyWG = 256

// CopyKernel builds the copy: y[i] = x[i] over n vec4<f32>, a grid-stride loop so that a grid
// within the device's limits covers any n. Bindings: 0 x, 1 y; push constant n.
func CopyKernel() (*codegen.Kernel, error) {
	b := codegen.NewBuilder("roofline_copy")
	v4 := codegen.Vec(codegen.F32, 4)
	x := b.Buffer("x", v4, codegen.ReadOnly)
	y := b.Buffer("y", v4, codegen.WriteOnly)
	n := b.Push("n", codegen.U32)
	b.WorkgroupSize(b.U32(copyWG), b.U32(1), b.U32(1))
	stride := b.Mul(b.X(b.NumWorkgroups()), b.U32(copyWG))
	b.For(b.X(b.GlobalID()), n, stride, func(i codegen.Value) {
		b.Store(y, i, b.Load(x, i))
	})
	return b.Finish()
}

// CopyRate runs the copy kernel (CopyKernel: vec4<f32>, 16 bytes an invocation a step) over
// size bytes on d, checks the copy, and returns the bytes read plus written per second: the
// bandwidth figure of Peaks, for benchmarks that rate a kernel against it in their own process.
func CopyRate(ctx context.Context, d *runtime.Device, size int64) (float64, error) {
	bw, _, err := measureCopy(ctx, d, max(size&^15, 1<<20))
	return bw, err
}

func measureCopy(ctx context.Context, d *runtime.Device, size int64) (float64, runtime.Measurement, error) {
	k, err := CopyKernel()
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	pl, err := pipeline(d, k)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer pl.Close()
	x, err := d.NewBuffer(size)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer x.Free()
	y, err := d.NewBuffer(size)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer y.Free()
	// A pattern in the first and last MiB of x, checked in y after the copy (the middle holds
	// whatever the allocation held; copying it is the same traffic).
	const probe = 1 << 20
	pat := make([]byte, probe)
	for i := 0; i < probe; i += 4 {
		binary.LittleEndian.PutUint32(pat[i:], uint32(i)*2654435761+uint32(size))
	}
	for _, off := range []int64{0, size - probe} {
		if err := d.Upload(x, off, pat); err != nil {
			return 0, runtime.Measurement{}, err
		}
	}
	n := size / 16
	groups := uint32(min((n+copyWG-1)/copyWG, int64(d.Info.Caps.MaxWorkgroupCount[0]), 1<<16))
	push := make([]byte, 4)
	binary.LittleEndian.PutUint32(push, uint32(n))
	if n > math.MaxUint32 {
		return 0, runtime.Measurement{}, fmt.Errorf("%d bytes: more than 2^32 vec4 elements", size)
	}
	prog, err := d.NewProgram(runtime.ProgramSpec{Dispatches: []runtime.Dispatch{{Pipeline: pl, Grid: [3]uint32{groups, 1, 1}, Push: push,
		Bindings: []runtime.Binding{{Buffer: x, Access: runtime.Read}, {Buffer: y, Access: runtime.Write}}}}})
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer prog.Close()
	if err := prog.Run(ctx, nil, nil); err != nil {
		return 0, runtime.Measurement{}, err
	}
	got := make([]byte, probe)
	for _, off := range []int64{0, size - probe} {
		if err := d.Download(y, off, got); err != nil {
			return 0, runtime.Measurement{}, err
		}
		for i := 0; i < probe; i += 4 {
			if w, g := binary.LittleEndian.Uint32(pat[i:]), binary.LittleEndian.Uint32(got[i:]); w != g {
				return 0, runtime.Measurement{}, fmt.Errorf("the copy is wrong: byte %d is %#x, want %#x", off+int64(i), g, w)
			}
		}
	}
	m, err := prog.Measure(ctx, runtime.MeasureOptions{Warmup: 2, Reps: 10})
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	if m.Median <= 0 {
		return 0, m, errors.New("the copy took no measurable time")
	}
	return float64(2*size) / m.Median.Seconds(), m, nil
}

// fmaChains is the number of independent multiply-add chains per invocation: enough to hide the
// fma latency by instruction-level parallelism.
const fmaChains = 16

// FMAKernel builds the multiply-add kernel: each invocation runs fmaChains independent chains
// a ← fma(a, m, c) for iters iterations, starting from a = gid + chain, and stores the sum of
// its chains to y[gid]. With m = 0.5 and c = 1 every chain converges to 2 in float32 (the
// arithmetic rounds to it exactly), so y is 2·fmaChains everywhere once iters ≥ 64: the check
// that the loop ran. Bindings: 0 y; push constants iters (u32), m, c (f32).
func FMAKernel(wg uint32) (*codegen.Kernel, error) {
	b := codegen.NewBuilder("roofline_fma")
	y := b.Buffer("y", codegen.F32, codegen.WriteOnly)
	iters := b.Push("iters", codegen.U32)
	mul := b.Push("m", codegen.F32)
	add := b.Push("c", codegen.F32)
	b.WorkgroupSize(b.U32(wg), b.U32(1), b.U32(1))
	gid := b.X(b.GlobalID())
	base := b.Convert(gid, codegen.F32)
	var acc [fmaChains]*codegen.Var
	for i := range acc {
		acc[i] = b.Var(fmt.Sprintf("a%d", i), b.Add(base, b.F32(float32(i))))
	}
	b.For(b.U32(0), iters, b.U32(1), func(codegen.Value) {
		for _, a := range acc {
			b.Set(a, b.Fma(b.Get(a), mul, add))
		}
	})
	sum := b.Get(acc[0])
	for _, a := range acc[1:] {
		sum = b.Add(sum, b.Get(a))
	}
	b.Store(y, gid, sum)
	return b.Finish()
}

func measureFMA(ctx context.Context, d *runtime.Device, cpu bool, minTime time.Duration) (float64, runtime.Measurement, error) {
	const wg = 256
	groups := uint32(4096) // 2^20 invocations: more than a large GPU holds at once
	if cpu {
		groups = 16
	}
	k, err := FMAKernel(wg)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	pl, err := pipeline(d, k)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer pl.Close()
	threads := int64(groups) * wg
	y, err := d.NewBuffer(4 * threads)
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer y.Free()
	push := func(iters uint32) []byte {
		b := make([]byte, 12)
		binary.LittleEndian.PutUint32(b, iters)
		binary.LittleEndian.PutUint32(b[4:], math.Float32bits(0.5))
		binary.LittleEndian.PutUint32(b[8:], math.Float32bits(1))
		return b
	}
	iters := uint32(64)
	prog, err := d.NewProgram(runtime.ProgramSpec{Dispatches: []runtime.Dispatch{{Pipeline: pl, Grid: [3]uint32{groups, 1, 1}, Push: push(iters),
		Bindings: []runtime.Binding{{Buffer: y, Access: runtime.Write}}}}})
	if err != nil {
		return 0, runtime.Measurement{}, err
	}
	defer prog.Close()
	if err := prog.Run(ctx, nil, nil); err != nil {
		return 0, runtime.Measurement{}, err
	}
	got := make([]byte, 4*threads)
	if err := d.Download(y, 0, got); err != nil {
		return 0, runtime.Measurement{}, err
	}
	for i := int64(0); i < threads; i++ {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != 2*fmaChains {
			return 0, runtime.Measurement{}, fmt.Errorf("the multiply-add chains are wrong: invocation %d sums to %v, want %d", i, v, 2*fmaChains)
		}
	}
	for {
		m, err := prog.Measure(ctx, runtime.MeasureOptions{Warmup: 2, Reps: 10})
		if err != nil {
			return 0, runtime.Measurement{}, err
		}
		if m.Median >= minTime || iters >= 1<<24 {
			if m.Median <= 0 {
				return 0, m, errors.New("the multiply-adds took no measurable time")
			}
			return float64(threads) * float64(iters) * fmaChains * 2 / m.Median.Seconds(), m, nil
		}
		iters *= 2
		if m.Median > 0 {
			iters = uint32(min(float64(1<<24), max(float64(iters), float64(iters)*float64(minTime)/float64(m.Median)*0.6)))
		}
		if err := prog.SetPush(0, 0, push(iters)[:4]); err != nil {
			return 0, runtime.Measurement{}, err
		}
	}
}

func pipeline(d *runtime.Device, k *codegen.Kernel) (*runtime.Pipeline, error) {
	return d.NewPipeline(runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize})
}

// CachePath is where the peaks of the device with fingerprint fp are cached:
// os.UserCacheDir()/vkc/peaks/<fingerprint>.json, or under dir when dir is not "".
func CachePath(dir string, fp runtime.Fingerprint) (string, error) {
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("peaks cache: %w", err)
		}
		dir = filepath.Join(base, "vkc", "peaks")
	}
	return filepath.Join(dir, fp.Hex()+".json"), nil
}

// Cached returns d's peaks from the cache under dir ("" is the user cache dir, see CachePath),
// measuring and storing them when there are none of this Method (or when remeasure is set).
// cached says the figures came from the file, path where they are. A cache that cannot be read
// or written is not an error (the figures are measured, and the reason is in warn); a
// measurement that fails is.
func Cached(ctx context.Context, d *runtime.Device, dir string, remeasure bool, o Options) (p *Peaks, cached bool, path string, warn error, err error) {
	path, warn = CachePath(dir, d.Info.Fingerprint)
	if warn == nil && !remeasure {
		if b, rerr := os.ReadFile(path); rerr == nil {
			var q Peaks
			if jerr := json.Unmarshal(b, &q); jerr != nil {
				warn = fmt.Errorf("peaks cache %s: %v (measuring again)", path, jerr)
			} else if q.Method == Method && q.Fingerprint == d.Info.Fingerprint.String() && q.Bandwidth > 0 && q.F32 > 0 {
				return &q, true, path, nil, nil
			}
		} else if !errors.Is(rerr, os.ErrNotExist) {
			warn = fmt.Errorf("peaks cache: %v (measuring again)", rerr)
		}
	}
	p, err = Measure(ctx, d, o)
	if err != nil {
		return nil, false, path, warn, err
	}
	if path != "" {
		if werr := writeAtomic(path, p); werr != nil {
			warn = fmt.Errorf("peaks cache: %v", werr)
		}
	}
	return p, false, path, warn, nil
}

// writeAtomic writes p as JSON to path through a temporary file in the same folder, so a reader
// never sees half a file.
func writeAtomic(path string, p *Peaks) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".peaks-*.json")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
	}
	return werr
}

// capCooperativeMatrixKHR is SPIR-V's CooperativeMatrixKHR capability.
const capCooperativeMatrixKHR = 6022

// UsesCoopMatrix reports whether a SPIR-V module declares the cooperative-matrix capability:
// its arithmetic runs on matrix units and compares with Peaks.CoopMatrix, not Peaks.F32.
func UsesCoopMatrix(words []uint32) bool {
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 {
			return false
		}
		if op == 17 && n >= 2 && i+1 < len(words) && words[i+1] == capCooperativeMatrixKHR { // OpCapability
			return true
		}
		if op != 17 && op != 11 && op != 10 && op != 14 { // past capabilities, extensions, imports, memory model
			return false
		}
		i += n
	}
	return false
}
