package tune

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/interp"
	"github.com/vkc-project/vkc/kernels"
	"github.com/vkc-project/vkc/runtime"
)

// CapsOf converts the runtime's description of a device into what templates need.
func CapsOf(info *runtime.DeviceInfo) kernels.Caps {
	c := info.Caps
	arith := uint32(1 << 2)
	shuffle := uint32(1<<4 | 1<<3)
	return kernels.Caps{
		CPU:                   info.Type == runtime.CPU,
		SubgroupSize:          int(c.SubgroupSize),
		SubgroupArithmetic:    uint32(c.SubgroupOps)&arith != 0 && c.SubgroupStages&0x20 != 0,
		SubgroupShuffle:       uint32(c.SubgroupOps)&shuffle == shuffle && c.SubgroupStages&0x20 != 0,
		Float16:               c.ShaderFloat16,
		Storage16:             c.StorageBuffer16BitAccess,
		MaxSharedBytes:        int(c.MaxSharedMemory),
		MaxInvocations:        int(c.MaxWorkgroupInvocations),
		MaxWorkgroupSize:      [3]int{int(c.MaxWorkgroupSize[0]), int(c.MaxWorkgroupSize[1]), int(c.MaxWorkgroupSize[2])},
		MaxGroups:             [3]int{int(c.MaxWorkgroupCount[0]), int(c.MaxWorkgroupCount[1]), int(c.MaxWorkgroupCount[2])},
		MinStorageOffsetAlign: int(max(c.MinStorageBufferOffset, 4)),
		IntegerDot:            c.IntegerDotProduct,
		MaxAllocation:         c.MaxMemoryAllocationSize,
		MaxBindingRange:       uint64(c.MaxStorageBufferRange),
		DeviceMemory:          info.DeviceLocalBytes(),
		VulkanMemoryModel:     c.VulkanMemoryModel,
		CoopShapes:            coopShapes(c.CooperativeMatrix),
		Coop2:                 coop2Caps(c.CooperativeMatrix2),
		BFloat16:              c.BFloat16,
		BFloat16Matrix:        c.BFloat16CooperativeMatrix,
	}
}

// coopShapes converts the device's subgroup-scope cooperative-matrix shapes whose element types
// codegen has (f16, bf16, f32, i32, u32); the 8-bit integer products are left out.
func coopShapes(ss []runtime.CoopMatrixShape) []kernels.CoopShape {
	var out []kernels.CoopShape
	for _, s := range ss {
		a, ok1 := elem(s.A)
		b, ok2 := elem(s.B)
		c, ok3 := elem(s.C)
		r, ok4 := elem(s.Result)
		if s.Scope != 3 || !ok1 || !ok2 || !ok3 || !ok4 {
			continue
		}
		out = append(out, kernels.CoopShape{M: int(s.M), N: int(s.N), K: int(s.K), A: a, B: b, C: c, Result: r})
	}
	return out
}

// elem is the codegen type of a cooperative-matrix component type, where codegen has one.
func elem(c runtime.ComponentType) (codegen.Type, bool) {
	switch c {
	case 0:
		return codegen.F16, true
	case 1:
		return codegen.F32, true
	case 5:
		return codegen.I32, true
	case 9:
		return codegen.U32, true
	case 1000141000:
		return codegen.BF16, true
	}
	return codegen.Type{}, false
}

// coop2Caps converts VK_NV_cooperative_matrix2 where the device has workgroup-scope matrices,
// flexible dimensions and tensor addressing, keeping the workgroup-scope entries whose element
// types codegen has; nil without those features or without such an entry.
func coop2Caps(m *runtime.CoopMatrix2) *kernels.Coop2Caps {
	if m == nil || !m.WorkgroupScope || !m.FlexibleDimensions || !m.TensorAddressing {
		return nil
	}
	if os.Getenv("VKC_COOPMAT2") == "off" {
		// The switch runtime.Open honors: a compile under it (the device list still shows the
		// extension) must not choose kernels the run will not have.
		return nil
	}
	out := &kernels.Coop2Caps{MaxWorkgroupSize: int(m.MaxWorkgroupSize), MaxDimension: int(m.MaxDimension), ReservedShared: int(m.ReservedShared)}
	for _, s := range m.Flexible {
		a, ok1 := elem(s.A)
		b, ok2 := elem(s.B)
		c, ok3 := elem(s.C)
		r, ok4 := elem(s.Result)
		if s.Scope != 2 || !ok1 || !ok2 || !ok3 || !ok4 {
			continue
		}
		out.Shapes = append(out.Shapes, kernels.Coop2Shape{MGran: int(s.MGranularity), NGran: int(s.NGranularity), KGran: int(s.KGranularity),
			A: a, B: b, C: c, Result: r, Invocations: int(s.WorkgroupInvocations)})
	}
	if len(out.Shapes) == 0 {
		return nil
	}
	return out
}

// deviceBytes encodes a host tensor the way kernels keep it in device memory (bool as u32).
func deviceBytes(x *ir.Tensor) []byte {
	if x.Type.DType != ir.Bool {
		return x.Data
	}
	out := make([]byte, 4*len(x.Data))
	for i, v := range x.Data {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

func deviceSize(t ir.Type) int {
	if t.DType == ir.Bool {
		return 4 * t.Shape.NumElements()
	}
	if t.DType.Quantized() || t.DType == ir.BF16 {
		// Kernels read blocks and bf16 weights as u32 words: the last word of a tensor that
		// ends mid-word (an odd number of 18-byte Q4_0 blocks or of bf16 values) must be whole.
		return (t.Bytes() + 3) &^ 3
	}
	return t.Bytes()
}

func hostTensor(t ir.Type, b []byte) *ir.Tensor {
	if t.DType != ir.Bool {
		return &ir.Tensor{Type: t, Data: b}
	}
	x := ir.NewTensor(t)
	for i := range x.Data {
		if binary.LittleEndian.Uint32(b[4*i:]) != 0 {
			x.Data[i] = 1
		}
	}
	return x
}

// Pipelines creates each distinct pipeline once: kernels are keyed by the SHA-256 of their
// SPIR-V and their specialization data, so configurations that differ only in specialization
// constants share a module (the driver's pipeline cache sees the same SPIR-V) and two
// configurations that realise the same kernel share the pipeline itself.
type Pipelines struct {
	d       *runtime.Device
	mu      sync.Mutex
	m       map[string]*pipelineSlot
	created int
	gen     int // Release's count: a slot of an older generation was released

	// Prefetching: jobs wait in urgent (the running search's next points) and later (other
	// problems' first points) and run on up to workers goroutines.
	urgent, later []prefetchJob
	running       int
	workers       int
	wg            sync.WaitGroup // prefetch goroutines

	keep     []string      // keys Keep marked before their pipelines were made
	creating time.Duration // the creation time of the created pipelines, summed

	// Wait, when positive, bounds how long Get waits for a pipeline: past it Get returns
	// ErrSlowPipeline and the driver's compile goes on in the background (Close waits for
	// it). A search then moves on from a configuration whose kernel the driver compiles for
	// seconds, where it held the device (and the selection's checks behind it) for as long: on
	// the H100 NVIDIA's compiler took more than 10 s on matmul_cm2
	// [bk=16,bm=32,bn=256,direct=1,unroll=8,wg=64], and SmolLM2's default compile timed no
	// round (three compiles of eight).
	Wait time.Duration
}

// ErrSlowPipeline is Get's error for a pipeline not made within Pipelines.Wait.
var ErrSlowPipeline = errors.New("the driver is still compiling the kernel")

// pipelineSlot is one pipeline, made once: the first Get of a key creates it, later ones (and
// those that came while it was being created) wait on done.
type pipelineSlot struct {
	done chan struct{}
	gen  int
	pl   *runtime.Pipeline
	err  error
	// kept: Release leaves it (a chosen configuration's kernel, or one a loaded plan holds).
	kept bool
}

// prefetchJob builds one launch whose pipelines Prefetch creates; tag groups a search's jobs.
type prefetchJob struct {
	tag   string
	build func() (*kernels.Launch, error)
	// kernel, when set instead of build, is a plan's module (PrefetchKernels).
	kernel *runtime.Kernel
}

// NewPipelines returns an empty pipeline cache for d. Close it to destroy the pipelines.
func NewPipelines(d *runtime.Device) *Pipelines {
	return &Pipelines{d: d, m: map[string]*pipelineSlot{}, workers: max(goruntime.GOMAXPROCS(0)-1, 1)}
}

// kernelKey identifies a kernel and its specialization data.
func kernelKey(k *codegen.Kernel, spec []uint32) string {
	h := sha256.New()
	var w [4]byte
	for _, x := range k.Words {
		binary.LittleEndian.PutUint32(w[:], x)
		h.Write(w[:])
	}
	fmt.Fprintf(h, "|%d|%d|%v", len(k.Bindings), k.PushSize, spec)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// runtimeKernelKey is kernelKey of a kernel given as the runtime takes it (a plan's module): the
// same key as the codegen kernel it was made of, when its entry point is main and its
// specialization constants are numbered 0..n-1 as codegen numbers them.
func runtimeKernelKey(k runtime.Kernel) string {
	h := sha256.New()
	h.Write(k.SPIRV)
	spec := make([]uint32, len(k.Spec))
	dense := true
	for _, s := range k.Spec {
		if int(s.ID) >= len(spec) {
			dense = false
			break
		}
		spec[s.ID] = s.Value
	}
	fmt.Fprintf(h, "|%d|%d|%v", k.Bindings, k.PushConstantSize, spec)
	if !dense || (k.Entry != "" && k.Entry != "main") {
		fmt.Fprintf(h, "|%s|%v", k.Entry, k.Spec)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// Get returns the pipeline of k specialised with spec, creating it on first use. It is safe
// for concurrent use; a pipeline being created by another call (a prefetch) is waited for.
func (c *Pipelines) Get(k *codegen.Kernel, spec []uint32) (*runtime.Pipeline, error) {
	return c.get(k, spec, -1, c.Wait)
}

// Kernel returns the pipeline of a kernel as the runtime takes it, shared with those Get makes
// (runtime.LoadOptions.Pipelines: a compile's candidate plans load their modules from the
// tuner's pipelines, so a kernel tuning built, or another candidate loaded, is not compiled
// again). Release keeps the pipelines given out so (an executable holds them) until Close.
func (c *Pipelines) Kernel(k runtime.Kernel) (*runtime.Pipeline, error) {
	return c.slot(runtimeKernelKey(k), func() runtime.Kernel { return k }, -1, true, 0)
}

// Keep marks the pipelines of a launch's kernels, made or to be made, as kept by Release: the
// kernels a compile chose, which its candidate plans will load.
func (c *Pipelines) Keep(l *kernels.Launch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range l.Steps {
		if st.Kernel == nil {
			continue
		}
		k := kernelKey(st.Kernel, st.Spec)
		if sl, ok := c.m[k]; ok {
			sl.kept = true
		} else {
			c.keep = append(c.keep, k)
		}
	}
}

// get is Get; a gen ≥ 0 (a prefetch's) that is no longer the cache's creates nothing; a wait > 0
// bounds the wait (Pipelines.Wait).
func (c *Pipelines) get(k *codegen.Kernel, spec []uint32, gen int, wait time.Duration) (*runtime.Pipeline, error) {
	return c.slot(kernelKey(k, spec), func() runtime.Kernel {
		rk := runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize}
		for id, v := range spec {
			rk.Spec = append(rk.Spec, runtime.SpecConstant{ID: uint32(id), Value: v})
		}
		return rk
	}, gen, false, wait)
}

// slot returns the pipeline of key, creating it from kernel() on first use (kept: Release
// leaves it), waiting at most wait when positive (ErrSlowPipeline; the creation goes on).
func (c *Pipelines) slot(key string, kernel func() runtime.Kernel, gen int, kept bool, wait time.Duration) (*runtime.Pipeline, error) {
	c.mu.Lock()
	if gen >= 0 && gen != c.gen {
		c.mu.Unlock()
		return nil, runtime.ErrClosed
	}
	if sl, ok := c.m[key]; ok {
		sl.kept = sl.kept || kept
		c.mu.Unlock()
		return sl.wait(wait)
	}
	sl := &pipelineSlot{done: make(chan struct{}), gen: c.gen, kept: kept}
	if i := slices.Index(c.keep, key); i >= 0 {
		sl.kept, c.keep = true, slices.Delete(c.keep, i, i+1)
	}
	c.m[key] = sl
	if wait > 0 {
		c.wg.Add(1) // Close waits for it
		c.mu.Unlock()
		go func() {
			defer c.wg.Done()
			c.create(sl, key, kernel)
		}()
		return sl.wait(wait)
	}
	c.mu.Unlock()
	c.create(sl, key, kernel)
	return sl.pl, sl.err
}

// wait returns the slot's pipeline once made, or ErrSlowPipeline after d when d > 0.
func (sl *pipelineSlot) wait(d time.Duration) (*runtime.Pipeline, error) {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-sl.done:
		case <-t.C:
			return nil, ErrSlowPipeline
		}
	}
	<-sl.done
	return sl.pl, sl.err
}

// create makes the pipeline of slot sl (registered under key) and marks it done.
func (c *Pipelines) create(sl *pipelineSlot, key string, kernel func() runtime.Kernel) {
	t0 := time.Now()
	sl.pl, sl.err = c.d.NewPipeline(kernel())
	dt := time.Since(t0)
	c.mu.Lock()
	switch {
	case sl.gen != c.gen:
		// Released while it was being created: nobody holds it.
		if sl.pl != nil {
			sl.pl.Close()
			sl.pl, sl.err = nil, runtime.ErrClosed
		}
	case sl.err != nil:
		delete(c.m, key) // a later Get tries again (and reports the error itself)
	default:
		c.created++
		c.creating += dt
	}
	c.mu.Unlock()
	close(sl.done)
}

// Prefetch queues launches (each a func that builds one) whose pipelines are then created in
// the background, on up to GOMAXPROCS−1 goroutines: a driver compiles a pipeline in the
// calling thread (NVIDIA's takes 0.3–1 s for a cooperative-matrix matmul), so a search that
// compiles its next points while it times the current one spends the device's time, not the
// compiler's. Urgent jobs (the running search's) go before the others. Errors are left for the
// search's own Build and Get to report.
func (c *Pipelines) Prefetch(tag string, urgent bool, builds []func() (*kernels.Launch, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range builds {
		if urgent {
			c.urgent = append(c.urgent, prefetchJob{tag: tag, build: b})
		} else {
			c.later = append(c.later, prefetchJob{tag: tag, build: b})
		}
	}
	c.startWorkers()
}

// PrefetchKernels queues the creation of plan modules' pipelines (as Kernel gives them, kept)
// behind the other prefetches: a measured selection's candidate plans, whose checks then find
// their kernels made.
func (c *Pipelines) PrefetchKernels(tag string, ks []runtime.Kernel) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range ks {
		c.later = append(c.later, prefetchJob{tag: tag, kernel: &ks[i]})
	}
	c.startWorkers()
}

// startWorkers starts prefetch workers for the queued jobs, up to c.workers (c.mu held).
func (c *Pipelines) startWorkers() {
	for c.running < c.workers && len(c.urgent)+len(c.later) > c.running {
		c.running++
		c.wg.Add(1)
		go c.prefetchWorker()
	}
}

func (c *Pipelines) prefetchWorker() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		var job prefetchJob
		gen := c.gen
		switch {
		case len(c.urgent) > 0:
			job, c.urgent = c.urgent[0], c.urgent[1:]
		case len(c.later) > 0:
			job, c.later = c.later[0], c.later[1:]
		default:
			c.running--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if job.kernel != nil {
			k := *job.kernel
			c.slot(runtimeKernelKey(k), func() runtime.Kernel { return k }, gen, true, 0)
			continue
		}
		l, err := job.build()
		if err != nil {
			continue
		}
		for _, st := range l.Steps {
			if _, err := c.get(st.Kernel, st.Spec, gen, 0); err != nil {
				break
			}
		}
	}
}

// Forget drops the queued prefetches of tag (those running finish).
func (c *Pipelines) Forget(tag string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := func(q []prefetchJob) []prefetchJob {
		out := q[:0]
		for _, j := range q {
			if j.tag != tag {
				out = append(out, j)
			}
		}
		return out
	}
	c.urgent, c.later = keep(c.urgent), keep(c.later)
}

// Len is the number of pipelines held; Created counts every pipeline ever created.
func (c *Pipelines) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Created is the number of pipelines created since NewPipelines.
func (c *Pipelines) Created() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created
}

// Release drops the queued prefetches and destroys every pipeline without waiting for those
// being created (they are destroyed when done); the cache stays usable. No pipeline it held may
// be in use.
func (c *Pipelines) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.urgent, c.later = nil, nil
	c.gen++
	for k, sl := range c.m {
		select {
		case <-sl.done:
			if sl.kept && sl.pl != nil {
				sl.gen = c.gen
				continue
			}
			if sl.pl != nil {
				sl.pl.Close()
			}
		default: // being created: Get destroys it
		}
		delete(c.m, k)
	}
}

// has reports whether the pipeline of key exists (or is being created).
func (c *Pipelines) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[key]
	return ok
}

// wordsBytes is SPIR-V words as the runtime takes them (little-endian bytes).
func wordsBytes(w []uint32) []byte {
	out := make([]byte, 4*len(w))
	for i, v := range w {
		binary.LittleEndian.PutUint32(out[4*i:], v)
	}
	return out
}

// CreateTime is the mean wall time of a pipeline's creation so far (0: none created): what the
// driver's compiler costs a kernel on this device, for budgeting work that creates pipelines.
func (c *Pipelines) CreateTime() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.created == 0 {
		return 0
	}
	return c.creating / time.Duration(c.created)
}

// closeAll destroys every pipeline, kept ones included.
func (c *Pipelines) closeAll() {
	c.mu.Lock()
	for _, sl := range c.m {
		sl.kept = false
	}
	c.mu.Unlock()
	c.Release()
}

// Close destroys every pipeline (kept ones too) and waits for the prefetches still creating
// pipelines: after it, the device may be closed.
func (c *Pipelines) Close() {
	c.closeAll()
	c.wg.Wait()
	c.closeAll() // what the prefetches finished meanwhile
}

// Bench is a Launch bound to device buffers as one runtime program: Run executes it on given
// arguments (to check it), Program().Measure times its dispatches on whatever the buffers hold.
type Bench struct {
	d       *runtime.Device
	p       *kernels.Problem
	args    []*runtime.Buffer
	outs    []*runtime.Buffer
	free    []*runtime.Buffer
	prog    *runtime.Program
	ownPipe *Pipelines // non-nil when the bench made its own pipelines
	rows    int        // the run-time length it runs at (0: none)
	// dispatches are the launch's, for the timing program.
	dispatches []runtime.Dispatch
	// cold are further copies of the arguments and timing the program that runs the launch
	// once on each set in turn (coldCopies), made at the first Measure or Sample (a bench that
	// only checks needs neither); nil where one set is enough.
	cold   [][]*runtime.Buffer
	timing *runtime.Program
}

// coldBytes: on a GPU a bench holds copies of its arguments, at least this many bytes in all,
// and Measure runs the launch on each copy in turn, so that no launch finds its operands in
// the L2 cache as the previous one left them. In a plan each layer reads weights (and a cache)
// of its own; a launch timed over one copy reads a matrix that fits the cache (50 MiB on an
// H100: Llama-3.1-8B's 4096×4096 Q8_0 product is 17 MiB) at the cache's rate, and a search
// ranks points for the wrong bottleneck. BenchmarkDecodeGEMV holds copies for the same reason
// (VKC_GEMV_COPIES=1 shows the difference).
const coldBytes = 128 << 20

// benchCopies is coldCopies (a test sets it to run copies on lavapipe).
var benchCopies = coldCopies

// coldCopies is the number of argument sets a bench of p holds on a device of type t: one on a
// CPU device (its caches are megabytes; a run costs milliseconds), else enough for coldBytes, at
// most 16.
func coldCopies(p *kernels.Problem, t runtime.DeviceType) int {
	if t == runtime.CPU {
		return 1
	}
	n := 0
	for _, a := range p.Args {
		n += deviceSize(a)
	}
	if n <= 0 {
		return 1
	}
	return min(max((coldBytes+n-1)/n, 1), 16)
}

// NewBench allocates the buffers of p and l on d and records the launch as a program. Pipelines
// come from pipes (nil: the bench makes and owns its own). A problem with a run-time length
// (kernels.Rows) runs at its capacity, where its meaning is the static problem's.
func NewBench(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, pipes *Pipelines) (_ *Bench, err error) {
	n := 0
	if p.Rows != nil {
		n = p.Rows.Max
	}
	return NewBenchAt(d, p, l, pipes, n)
}

// NewBenchAt is NewBench for a problem with a run-time length, run at length n: the Len operand
// holds n and every step with a GridScale is issued with the grid for n (an indirect dispatch,
// as the runtime issues it). Only the first rows of the bounded results are then defined (see
// kernels.Problem.At for the problem they are the results of).
func NewBenchAt(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, pipes *Pipelines, n int) (_ *Bench, err error) {
	b := &Bench{d: d, p: p, rows: n}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if pipes == nil {
		pipes = NewPipelines(d)
		b.ownPipe = pipes
	}
	alloc := func(n int) (*runtime.Buffer, error) {
		buf, err := d.NewBuffer(int64(max(n, 16)))
		if err == nil {
			b.free = append(b.free, buf)
		}
		return buf, err
	}
	b.args = make([]*runtime.Buffer, len(p.Args))
	for i, t := range p.Args {
		if b.args[i], err = alloc(deviceSize(t)); err != nil {
			return nil, err
		}
	}
	b.outs = make([]*runtime.Buffer, len(p.Outs))
	for i, t := range p.Outs {
		if a, ok := l.InPlace[i]; ok {
			if a < 0 || a >= len(b.args) {
				return nil, fmt.Errorf("result %d is in place of argument %d of %d", i, a, len(b.args))
			}
			b.outs[i] = b.args[a]
			continue
		}
		if b.outs[i], err = alloc(deviceSize(t)); err != nil {
			return nil, err
		}
	}
	scratch := make([]*runtime.Buffer, len(l.Scratch))
	for i, n := range l.Scratch {
		if scratch[i], err = alloc(n); err != nil {
			return nil, err
		}
	}
	// Sync words start at zero; the launch leaves them so, run after run.
	syncs := make([]*runtime.Buffer, len(l.Sync))
	for i, n := range l.Sync {
		if syncs[i], err = alloc(n); err != nil {
			return nil, err
		}
		if err := d.Upload(syncs[i], 0, make([]byte, max(n, 16))); err != nil {
			return nil, err
		}
	}
	// The length block: n, then the group counts of the scaled steps (as the runtime lays out).
	var lenBuf *runtime.Buffer
	var block []byte
	if p.Rows != nil {
		if n < 1 || n > p.Rows.Max {
			return nil, fmt.Errorf("length %d outside 1..%d", n, p.Rows.Max)
		}
		block = binary.LittleEndian.AppendUint32(nil, uint32(n))
		block = append(block, make([]byte, 12)...)
		for _, s := range l.Steps {
			if s.Scale != nil {
				for _, g := range s.Scale.Groups(s.Grid, n) {
					block = binary.LittleEndian.AppendUint32(block, g)
				}
			}
		}
		if lenBuf, err = alloc(len(block)); err != nil {
			return nil, err
		}
		if err := d.Upload(lenBuf, 0, block); err != nil {
			return nil, err
		}
	}
	indirect := 16
	var spec runtime.ProgramSpec
	for si, s := range l.Steps {
		k := s.Kernel
		if len(s.Bindings) != len(k.Bindings) {
			return nil, fmt.Errorf("step %d (%s): %d operands for %d bindings", si, k.Name, len(s.Bindings), len(k.Bindings))
		}
		pl, err := pipes.Get(k, s.Spec)
		if err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", si, k.Name, err)
		}
		disp := runtime.Dispatch{Pipeline: pl, Push: s.Push, Grid: s.Grid}
		if s.Scale != nil && lenBuf != nil {
			disp.Indirect, disp.IndirectOffset = lenBuf, int64(indirect)
			indirect += 12
		}
		for bi, op := range s.Bindings {
			var buf *runtime.Buffer
			size := int64(0)
			switch {
			case op.Kind == kernels.Len && lenBuf != nil:
				buf, size = lenBuf, 4
			case op.Kind == kernels.Arg && op.Index >= 0 && op.Index < len(b.args):
				buf = b.args[op.Index]
			case op.Kind == kernels.Out && op.Index >= 0 && op.Index < len(b.outs):
				buf = b.outs[op.Index]
			case op.Kind == kernels.Scratch && op.Index >= 0 && op.Index < len(scratch):
				buf = scratch[op.Index]
			case op.Kind == kernels.Sync && op.Index >= 0 && op.Index < len(syncs):
				buf = syncs[op.Index]
			default:
				return nil, fmt.Errorf("step %d binding %d: bad operand %v", si, bi, op)
			}
			disp.Bindings = append(disp.Bindings, runtime.Binding{Buffer: buf, Size: size, Access: RuntimeAccess(k.Bindings[bi].Access)})
		}
		spec.Dispatches = append(spec.Dispatches, disp)
	}
	spec.KeepOrder = true
	if b.prog, err = d.NewProgram(spec); err != nil {
		return nil, err
	}
	b.dispatches = spec.Dispatches
	return b, nil
}

// timed returns the program Measure and Sample time and the launches it runs: on first use
// where the bench holds copies (benchCopies), the further argument sets, filled on the device
// with the arguments as the last Exec left them, and a program that runs the launch on the
// arguments and then on each set.
func (b *Bench) timed() (*runtime.Program, int, error) {
	copies := benchCopies(b.p, b.d.Info.Type)
	if copies <= 1 {
		return b.prog, 1, nil
	}
	if b.timing != nil {
		return b.timing, len(b.cold) + 1, nil
	}
	timing := runtime.ProgramSpec{KeepOrder: true, Dispatches: slices.Clone(b.dispatches)}
	for c := 1; c < copies; c++ {
		set := make([]*runtime.Buffer, len(b.args))
		swap := map[*runtime.Buffer]*runtime.Buffer{}
		for i, t := range b.p.Args {
			n := deviceSize(t)
			buf, err := b.d.NewBuffer(int64(max(n, 16)))
			if err != nil {
				return nil, 0, err
			}
			b.free = append(b.free, buf)
			if err := b.d.Copy(buf, b.args[i], int64(n)); err != nil {
				return nil, 0, err
			}
			set[i], swap[b.args[i]] = buf, buf
		}
		b.cold = append(b.cold, set)
		for _, disp := range b.dispatches {
			disp.Bindings = slices.Clone(disp.Bindings)
			for i, bd := range disp.Bindings {
				if to, ok := swap[bd.Buffer]; ok && !slices.Contains(b.outs, bd.Buffer) {
					disp.Bindings[i].Buffer = to
				}
			}
			timing.Dispatches = append(timing.Dispatches, disp)
		}
	}
	var err error
	if b.timing, err = b.d.NewProgram(timing); err != nil {
		return nil, 0, err
	}
	return b.timing, len(b.cold) + 1, nil
}

// Run uploads args, runs the launch once and returns the results.
func (b *Bench) Run(ctx context.Context, args []*ir.Tensor) ([]*ir.Tensor, error) {
	if err := b.Exec(ctx, args); err != nil {
		return nil, err
	}
	p := b.p
	outs := make([]*ir.Tensor, len(p.Outs))
	for i, t := range p.Outs {
		buf := make([]byte, deviceSize(t))
		if err := b.d.Download(b.outs[i], 0, buf); err != nil {
			return nil, err
		}
		outs[i] = hostTensor(t, buf)
	}
	return outs, nil
}

// Exec uploads args and runs the launch once, reading nothing back.
func (b *Bench) Exec(ctx context.Context, args []*ir.Tensor) error {
	p := b.p
	if len(args) != len(p.Args) {
		return fmt.Errorf("%d arguments for a problem of %d", len(args), len(p.Args))
	}
	for i, a := range args {
		if !a.Type.Equal(p.Args[i]) {
			return fmt.Errorf("argument %d is %s, the problem wants %s", i, a.Type, p.Args[i])
		}
		if err := b.d.Upload(b.args[i], 0, deviceBytes(a)); err != nil {
			return err
		}
		for _, set := range b.cold { // made by an earlier Measure: they follow the arguments
			if err := b.d.Copy(set[i], b.args[i], int64(deviceSize(p.Args[i]))); err != nil {
				return err
			}
		}
	}
	return b.prog.Run(ctx, nil, nil)
}

// Program is the recorded launch (one run on the arguments Exec uploaded).
func (b *Bench) Program() *runtime.Program { return b.prog }

// Measure times the launch as runtime.Program.Measure does, on each copy of the arguments in
// turn where the bench holds copies (coldCopies); the figures are per launch.
func (b *Bench) Measure(ctx context.Context, o runtime.MeasureOptions) (runtime.Measurement, error) {
	prog, launches, err := b.timed()
	if err != nil {
		return runtime.Measurement{}, err
	}
	m, err := prog.Measure(ctx, o)
	n := time.Duration(launches)
	for i := range m.Samples {
		m.Samples[i] /= n
	}
	m.Min, m.Max, m.Median, m.P10, m.P90 = m.Min/n, m.Max/n, m.Median/n, m.P10/n, m.P90/n
	return m, err
}

// Sample runs the launch once on each copy of the arguments (once where the bench holds none)
// and returns the GPU time per launch, 0 where the device cannot say.
func (b *Bench) Sample(ctx context.Context) (time.Duration, error) {
	p, n, err := b.timed()
	if err != nil {
		return 0, err
	}
	if err := p.Run(ctx, nil, nil); err != nil {
		return 0, err
	}
	t, err := p.LastGPUTime()
	if err != nil {
		return 0, nil
	}
	return t / time.Duration(n), nil
}

// Close frees the program and buffers (and the pipelines when the bench owns them).
func (b *Bench) Close() {
	if b.prog != nil {
		b.prog.Close()
		b.prog = nil
	}
	if b.timing != nil {
		b.timing.Close()
		b.timing = nil
	}
	for _, buf := range b.free {
		buf.Free()
	}
	b.free = nil
	if b.ownPipe != nil {
		b.ownPipe.Close()
		b.ownPipe = nil
	}
}

// RunLaunch executes a Launch for p on d once with the given arguments and returns the results;
// everything it creates is freed before it returns.
func RunLaunch(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, args []*ir.Tensor) ([]*ir.Tensor, error) {
	n := 0
	if p.Rows != nil {
		n = p.Rows.Max
	}
	return RunLaunchAt(d, p, l, args, n)
}

// RunLaunchAt is RunLaunch for a problem with a run-time length, at length n (see NewBenchAt):
// args have p's capacity types, and only the first rows of the bounded results are defined.
func RunLaunchAt(d *runtime.Device, p *kernels.Problem, l *kernels.Launch, args []*ir.Tensor, n int) ([]*ir.Tensor, error) {
	if len(args) != len(p.Args) {
		return nil, fmt.Errorf("%d arguments for a problem of %d", len(args), len(p.Args))
	}
	b, err := NewBenchAt(d, p, l, nil, n)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return b.Run(context.Background(), args)
}

// ArgsAt splits args, p's arguments at its capacity, for a run at the length of at (p.At(n)):
// cut holds the first rows of the bounded arguments (at's arguments, for the reference), dev
// the arguments for the device with the rows past the run's poisoned (NaN for floats), so that
// a kernel reading rows the run does not have shows in its results. Unbounded arguments are
// args' own in both.
func ArgsAt(p, at *kernels.Problem, args []*ir.Tensor) (cut, dev []*ir.Tensor) {
	cut = make([]*ir.Tensor, len(args))
	dev = make([]*ir.Tensor, len(args))
	for i, a := range args {
		cut[i], dev[i] = a, a
		if !p.Rows.Arg(i) {
			continue
		}
		keep := at.Args[i].Bytes()
		cut[i] = &ir.Tensor{Type: at.Args[i], Data: a.Data[:keep]}
		poisoned := &ir.Tensor{Type: a.Type, Data: append([]byte(nil), a.Data...)}
		if a.Type.DType.IsFloat() {
			nan := ir.TensorFromFloat64s(ir.Type{DType: a.Type.DType, Shape: ir.Shape{}}, []float64{math.NaN()})
			size := a.Type.DType.Size()
			for off := keep; off+size <= len(poisoned.Data); off += size {
				copy(poisoned.Data[off:], nan.Data[:size])
			}
		}
		dev[i] = poisoned
	}
	return cut, dev
}

// ResultsAt returns the first rows of got's bounded results (p's results of a run at the length
// of at), typed as at's, for comparing with at's reference; unbounded results are got's own.
func ResultsAt(p, at *kernels.Problem, got []*ir.Tensor) []*ir.Tensor {
	out := make([]*ir.Tensor, len(got))
	for i, g := range got {
		out[i] = g
		if p.Rows.Out(i) && i < len(at.Outs) {
			out[i] = &ir.Tensor{Type: at.Outs[i], Data: g.Data[:at.Outs[i].Bytes()]}
		}
	}
	return out
}

// Expect evaluates p's reference function on args in the interpreter.
func Expect(p *kernels.Problem, args []*ir.Tensor) ([]*ir.Tensor, error) {
	f, err := p.Reference()
	if err != nil {
		return nil, err
	}
	env := interp.Env{Inputs: map[string]*ir.Tensor{}}
	for i, a := range args {
		env.Inputs[fmt.Sprintf("a%d", i)] = a
	}
	vals := make([]ir.Value, len(f.Outputs))
	for i, o := range f.Outputs {
		vals[i] = o.Value
	}
	return interp.EvalValues(f, env, vals...)
}

// Compare checks got against want: for floats, max abs error ≤ tol relative to the largest
// magnitude of the row (last axis) plus tol absolute; integers and bools exactly. It returns ""
// or a description of the worst element.
func Compare(got, want *ir.Tensor, tol float64) string {
	return newRefView(want).compare(got, tol)
}

// refView is what comparisons derive from a reference tensor alone, each part derived at its
// first use and kept for the comparisons after it (a selection checks every candidate of a
// function against the same reference): its values as float64, its rows' (last axis) largest
// magnitudes and largest values, and the k largest values of each row.
type refView struct {
	t   *ir.Tensor
	row int // the last axis's length (1 for a scalar)

	valsOnce sync.Once
	vals     []float64

	rowsOnce    sync.Once
	scale, best []float64 // a row's largest magnitude and largest value
	nan         []bool    // a row holds a NaN

	topMu sync.Mutex
	top   map[int][][]float64 // k → each row's k largest values (largest)
}

func newRefView(t *ir.Tensor) *refView {
	v := &refView{t: t, row: 1}
	if r := t.Type.Shape.Rank(); r > 0 && t.Type.Shape[r-1] > 0 {
		v.row = t.Type.Shape[r-1]
	}
	return v
}

func (v *refView) values() []float64 {
	v.valsOnce.Do(func() { v.vals = v.t.Float64s() })
	return v.vals
}

func (v *refView) rows() {
	v.rowsOnce.Do(func() {
		w := v.values()
		n := len(w) / v.row
		v.scale, v.best, v.nan = make([]float64, n), make([]float64, n), make([]bool, n)
		for r := range n {
			scale, best := 0.0, math.Inf(-1)
			for _, x := range w[r*v.row : (r+1)*v.row] {
				if a := math.Abs(x); a > scale {
					scale = a
				} else if a != a {
					v.nan[r] = true
				}
				best = math.Max(best, x)
			}
			v.scale[r], v.best[r] = scale, best
		}
	})
}

// largest returns each row's k largest values.
func (v *refView) largest(k int) [][]float64 {
	v.topMu.Lock()
	defer v.topMu.Unlock()
	if t, ok := v.top[k]; ok {
		return t
	}
	w := v.values()
	t := make([][]float64, len(w)/v.row)
	for r := range t {
		t[r] = largest(w[r*v.row:(r+1)*v.row], k)
	}
	if v.top == nil {
		v.top = map[int][][]float64{}
	}
	v.top[k] = t
	return t
}

// compare is Compare(got, v.t, tol).
func (v *refView) compare(got *ir.Tensor, tol float64) string {
	want := v.t
	if !got.Type.Equal(want.Type) {
		return fmt.Sprintf("type %s, want %s", got.Type, want.Type)
	}
	w := v.values()
	if len(w) == 0 {
		return ""
	}
	g := got.Float64s()
	v.rows()
	row := v.row
	isFloat := want.Type.DType.IsFloat()
	worst, wi := 0.0, -1
	for r := 0; r*row < len(w); r++ {
		wr, gr := w[r*row:(r+1)*row], g[r*row:(r+1)*row]
		// The row's largest difference is its worst error (one scale a row): a division a
		// row, not an element, and no math.Max (SmolLM2's score logits, 37×49152, took 27 ms
		// an element at a time on the CI machine, in every candidate's check). A NaN in the
		// reference leaves the row's errors unmeasured.
		most, mi := 0.0, -1
		for i, wv := range wr {
			gv := gr[i]
			if (wv != wv) != (gv != gv) || !isFloat && gv != wv {
				return fmt.Sprintf("element %d: got %g, want %g", r*row+i, gv, wv)
			}
			if d := math.Abs(gv - wv); d > most {
				most, mi = d, i
			}
		}
		if e := most / (v.scale[r] + 1); mi >= 0 && !v.nan[r] && e > worst {
			worst, wi = e, r*row+mi
		}
	}
	if worst > tol {
		return fmt.Sprintf("element %d: got %g, want %g (error %.3g of the row scale, tolerance %.3g)", wi, g[wi], w[wi], worst, tol)
	}
	return ""
}

// compareTopK is CompareTopK(got, v.t, k, tol).
func (v *refView) compareTopK(got *ir.Tensor, k int, tol float64) string {
	sh := v.t.Type.Shape
	if sh.Rank() == 0 || k < 1 {
		return "top-k over an empty axis"
	}
	row := v.row
	idx, sc := got.Float64s(), v.values()
	if len(idx)*row != len(sc)*k {
		return fmt.Sprintf("%d indices for %d rows of %d scores, k=%d", len(idx), len(sc)/row, row, k)
	}
	if k > row {
		return fmt.Sprintf("k=%d exceeds the %d scores of a row", k, row)
	}
	v.rows()
	tops := v.largest(k)
	seen := map[int]bool{}
	for r := 0; r < len(sc)/row; r++ {
		s, sorted := sc[r*row:(r+1)*row], tops[r]
		clear(seen)
		for t := 0; t < k; t++ {
			gi := idx[r*k+t]
			i := int(gi)
			if float64(i) != gi || i < 0 || i >= row || seen[i] {
				return fmt.Sprintf("row %d: index %d (rank %d) is out of range [0, %d) or repeated", r, i, t, row)
			}
			seen[i] = true
			if e := math.Abs(sorted[t]-s[i]) / (v.scale[r] + 1); e > tol {
				return fmt.Sprintf("row %d: rank %d is index %d scoring %g, the rank's score is %g (%.3g of the row scale, tolerance %g)", r, t, i, s[i], sorted[t], e, tol)
			}
		}
	}
	return ""
}

// compareArgmax is CompareArgmax(got, v.t, tol).
func (v *refView) compareArgmax(got *ir.Tensor, tol float64) string {
	sh := v.t.Type.Shape
	if sh.Rank() == 0 || sh[sh.Rank()-1] == 0 {
		return "argmax over an empty axis"
	}
	row := v.row
	idx, sc := got.Float64s(), v.values()
	if len(idx)*row != len(sc) {
		return fmt.Sprintf("%d indices for %d rows of %d scores", len(idx), len(sc)/row, row)
	}
	v.rows()
	for r, gi := range idx {
		s := sc[r*row : (r+1)*row]
		i := int(gi)
		if float64(i) != gi || i < 0 || i >= row {
			return fmt.Sprintf("row %d: index %g is out of range [0, %d)", r, gi, row)
		}
		if e := (v.best[r] - s[i]) / (v.scale[r] + 1); e > tol {
			return fmt.Sprintf("row %d: index %d scores %g, the best is %g (%.3g of the row scale below it, tolerance %g)", r, i, s[i], v.best[r], e, tol)
		}
	}
	return ""
}

// Tolerance is the default comparison tolerance for a dtype: results are computed in f32, so
// f16 results differ from the interpreter's rounding by about one f16 ulp.
func Tolerance(d ir.DType) float64 {
	if d == ir.F16 {
		return 2e-3
	}
	if d == ir.BF16 {
		return 1.6e-2 // two ulps of bfloat16's 8-bit significand
	}
	return 1e-4
}

// ProblemTolerance is the tolerance of result i of p: its dtype's, or the op's own result's when an
// epilogue widens it. An f16 matmul whose epilogue casts to f32 is only as exact as f16: the
// interpreter rounds the op's value to f16 before the cast, a kernel may not (NVIDIA's compiler
// removes an f32→f16→f32 round trip, measured on the H200 with matmul_coop: 3.5e-4 of the row
// scale off, against f32's 1e-4).
//
// A result a rope part rotates is only as exact as its angles: a kernel computes pos·freq in
// f32, the interpreter in float64, and at the positions the check uses (a cache part's last
// rows: 1023 for a 1024-row cache) that is more than f32's 1e-4 (ropeAngleTolerance).
func ProblemTolerance(p *kernels.Problem, i int) float64 {
	tol := Tolerance(p.Outs[i].DType)
	if p.Op != kernels.FusedElementwise && p.Expr != nil && len(p.Expr.Inputs) > 0 {
		tol = max(tol, Tolerance(p.Expr.Inputs[0].DType))
	}
	for _, pt := range p.Parts {
		if pt.Kind == kernels.PartRope && pt.Out == i {
			tol = max(tol, ropeAngleTolerance(partsMaxPos(p)))
		}
	}
	return tol
}

// ropeAngleTolerance is the error, relative to the row's scale, of a rotation at positions up
// to pos computed in f32: an angle a = pos·freq (freq ≤ 1) is off by up to about 3 of its ulps
// (the product's rounding, the frequency's exp2, a device's reduction of it for sin and cos:
// NVIDIA's rotation by 1023 rad, whose f32 angle is exact, was 1.0e-4 of the row scale off in
// the tuner's check of the 1B file's one-row QKV product), a·3·2⁻²⁴, and a rotated element
// x0·cos − x1·sin moves by that times |x0| + |x1|, at most twice the row's scale.
func ropeAngleTolerance(pos int) float64 {
	return 6 * float64(pos) * math.Ldexp(1, -24)
}

// Int8FunctionTolerance is the tolerance of a whole function's outputs when its matrix products
// may quantize activations to 8 bits (kernels.Int8Mode): llama.cpp's CPU backend, which does so,
// is 2.8e-2 to 5.2e-2 row-relative away from exact arithmetic on the llama.cpp oracle's models,
// whose README allows twice that (its tolerance (2), 0.064 to 0.11).
const Int8FunctionTolerance = 0.1

// LaunchTolerance is the tolerance of result i of p as launch l computes it: ProblemTolerance,
// or the error the launch declares (Launch.Tolerance: 8-bit activations, matmul_coop's f16
// roundings of a product's terms) when larger.
func LaunchTolerance(l *kernels.Launch, p *kernels.Problem, i int) float64 {
	return max(ProblemTolerance(p, i), l.Tolerance)
}

// FunctionTolerance is the tolerance of a whole function's outputs. One kernel's f16 result
// differs from the interpreter's by about an ulp, but through a deep f16 network (fused kernels
// keep f32 where the interpreter rounds every node to f16) the differences add up: SmolLM2-135M's
// 30 layers ended 2.2e-3 to 2.5e-3 of the row scale away on the H200, every candidate alike, and
// PyTorch's f16 logits of the same model are 4.2e-3 away. f32 functions keep the kernel tolerance.
func FunctionTolerance(d ir.DType) float64 {
	if d == ir.F16 || d == ir.BF16 {
		return 1e-2
	}
	return Tolerance(d)
}

// Random returns a tensor of normal values (floats) or small integers in [0, 8) (ints).
func Random(rng *rand.Rand, t ir.Type) *ir.Tensor {
	if t.DType.Quantized() {
		// ggml's blocks with random quants and moderate scales (quant.RandomBlocks).
		f := t.DType.Format()
		return &ir.Tensor{Type: t, Data: f.RandomBlocks(rng, t.Bytes()/f.BlockBytes)}
	}
	v := make([]float64, t.Shape.NumElements())
	for i := range v {
		switch {
		case t.DType.IsFloat():
			v[i] = rng.NormFloat64()
		case t.DType == ir.Bool:
			v[i] = float64(rng.Intn(2))
		default:
			v[i] = float64(rng.Intn(8))
		}
	}
	return ir.TensorFromFloat64s(t, v)
}

// RuntimeAccess is the runtime's access (for its barriers) of a kernel binding declared with a.
func RuntimeAccess(a codegen.Access) runtime.Access {
	switch a {
	case codegen.ReadOnly:
		return runtime.Read
	case codegen.WriteOnly:
		return runtime.Write
	}
	return runtime.ReadWrite
}
