package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/runtime"
)

// The barrier study of issue 14: what one barrier between dependent dispatches costs as a
// function of the work on either side, whether buffer-range barriers are cheaper than global
// ones, and what a persistent kernel (one dispatch whose workgroups, all resident, meet at a
// grid barrier between phases) would gain over one dispatch per phase. For the H200:
//
//	runtime.test -test.run '^$' -test.bench 'BarrierCost|RangeBarriers|PersistentPhases' -test.benchtime 1x -test.v
//
// (scripts/gpu-bench.sh, part study). Every figure is a median of Program.Measure (GPU
// timestamps, the dispatches repeated in one submission) and is printed as a line starting
// "STUDY" for the benchmark table. On lavapipe the shapes are tiny (a check that the benchmarks
// run, not a measurement). Kernels are built with codegen (this is an external test package).
//
// Each case times three programs of the same work:
//   - chain: K dispatches, each reading what the one before wrote (K−1 barriers);
//   - overlapped: the K dispatches on disjoint buffers (no barrier; the driver may run them
//     concurrently);
//   - fused: one dispatch doing all K steps' work (the floor: no boundary at all).
//
// A barrier's cost at that work is (chain − fused)/(K − 1): the time a dependent step adds to its
// work. The decode of SmolLM2 has about 150 dependent steps of 0.6–2 MB each (weights read by a
// few hundred workgroups); the memory-bound cases bracket that.

// studyDevice opens the device once per benchmark, or skips saying why.
func studyDevice(b *testing.B) (*runtime.Device, bool) {
	b.Helper()
	d, err := runtime.Open(runtime.Options{CacheDir: b.TempDir(), Validation: os.Getenv("VKC_STUDY_VALIDATION") != ""})
	if errors.Is(err, runtime.ErrNoVulkan) || errors.Is(err, runtime.ErrNoDevice) {
		b.Skipf("no Vulkan device: %v", err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if !d.Info.Caps.Timestamps {
		b.Skip("the device has no timestamps")
	}
	return d, d.Info.Type == runtime.CPU
}

func studyPipeline(b *testing.B, d *runtime.Device, build func() (*codegen.Kernel, error)) *runtime.Pipeline {
	b.Helper()
	k, err := build()
	if err != nil {
		b.Fatal(err)
	}
	p, err := d.NewPipeline(runtime.Kernel{Name: k.Name, SPIRV: k.Bytes(), Bindings: len(k.Bindings), PushConstantSize: k.PushSize})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

func studyBuffer(b *testing.B, d *runtime.Device, size int64) *runtime.Buffer {
	b.Helper()
	x, err := d.NewBuffer(size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Free() })
	return x
}

func u32s(v ...uint32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}

const studyWG = 256

// busyKernel: invocation i < n runs iters steps of four multiply-add chains on x[i] (plus, with
// neighbour, the value of the next workgroup's element, so a step depends on other workgroups'
// writes as a layer depends on the whole vector) and stores the result. Bindings: x (and, for
// the persistent form, sync). Push: iters, n, phases, limit.
//
// The persistent form (phases > 1 matters) runs phases steps and meets at a grid barrier between
// them: every workgroup increments sync[0]; the last to arrive resets it and increments the
// generation sync[1], which the others spin on (an atomic read), giving up after limit polls
// and counting that in sync[2] (the grid was not all resident). It needs no reset between runs.
func busyKernel(persistent bool) (*codegen.Kernel, error) {
	name := "study_busy"
	if persistent {
		name = "study_persistent"
	}
	b := codegen.NewBuilder(name)
	x := b.Buffer("x", codegen.F32, codegen.ReadWrite, codegen.Coherent)
	var sync *codegen.Buffer
	if persistent {
		sync = b.Buffer("sync", codegen.U32, codegen.ReadWrite, codegen.Coherent)
	}
	iters := b.Push("iters", codegen.U32)
	n := b.Push("n", codegen.U32)
	phases := b.Push("phases", codegen.U32)
	limit := b.Push("limit", codegen.U32)
	b.WorkgroupSize(b.U32(studyWG), b.U32(1), b.U32(1))
	u := func(v uint32) codegen.Value { return b.U32(v) }
	gid, li := b.X(b.GlobalID()), b.LocalIndex()
	in := b.Lt(gid, n)
	idx := b.Select(in, gid, u(0))
	other := b.Rem(b.Add(idx, u(studyWG)), b.Max(n, u(1)))
	step := func() {
		v := b.Add(b.Load(x, idx), b.Mul(b.Load(x, other), b.F32(1e-30)))
		var acc [4]*codegen.Var
		for c := range acc {
			acc[c] = b.Var(fmt.Sprintf("a%d", c), b.Add(v, b.F32(float32(c))))
		}
		b.For(u(0), iters, u(1), func(codegen.Value) {
			for _, a := range acc {
				b.Set(a, b.Fma(b.Get(a), b.F32(0.5), b.F32(1)))
			}
		})
		s := b.Mul(b.Add(b.Add(b.Get(acc[0]), b.Get(acc[1])), b.Add(b.Get(acc[2]), b.Get(acc[3]))), b.F32(0.25))
		b.If(in, func() { b.Store(x, idx, s) })
	}
	if !persistent {
		step()
		return b.Finish()
	}
	groups := b.X(b.NumWorkgroups())
	b.For(u(0), phases, u(1), func(ph codegen.Value) {
		step()
		b.If(b.Lt(b.Add(ph, u(1)), phases), func() {
			// The grid barrier: writes released, one invocation per workgroup arrives.
			b.MemoryBarrier(codegen.ScopeDevice, codegen.SemStorageBuffer)
			b.ControlBarrier(codegen.ScopeWorkgroup, codegen.ScopeDevice, codegen.SemStorageBuffer|codegen.SemWorkgroup)
			b.If(b.Eq(li, u(0)), func() {
				gen := b.AtomicAdd(sync, u(1), u(0))
				old := b.AtomicAdd(sync, u(0), u(1))
				b.IfElse(b.Eq(old, b.Sub(groups, u(1))), func() {
					b.AtomicExchange(sync, u(0), u(0))
					b.MemoryBarrier(codegen.ScopeDevice, codegen.SemStorageBuffer)
					b.AtomicAdd(sync, u(1), u(1))
				}, func() {
					polls := b.Var("polls", u(0))
					b.Loop(func() {
						cur := b.AtomicAdd(sync, u(1), u(0))
						b.If(b.Or(b.Ne(cur, gen), b.Ge(b.Get(polls), limit)), b.Break)
						b.Set(polls, b.Add(b.Get(polls), u(1)))
					})
					b.If(b.Ge(b.Get(polls), limit), func() { b.AtomicAdd(sync, u(2), u(1)) })
				})
			})
			b.ControlBarrier(codegen.ScopeWorkgroup, codegen.ScopeDevice, codegen.SemStorageBuffer|codegen.SemWorkgroup)
			b.MemoryBarrier(codegen.ScopeDevice, codegen.SemStorageBuffer)
		})
	})
	return b.Finish()
}

// copyKernel: dst[i] = src[i] over n vec4 elements, a grid-stride loop. Push: n.
func copyKernelCG() (*codegen.Kernel, error) {
	b := codegen.NewBuilder("study_copy")
	v4 := codegen.Vec(codegen.F32, 4)
	src := b.Buffer("src", v4, codegen.ReadOnly)
	dst := b.Buffer("dst", v4, codegen.WriteOnly)
	n := b.Push("n", codegen.U32)
	b.WorkgroupSize(b.U32(studyWG), b.U32(1), b.U32(1))
	stride := b.Mul(b.X(b.NumWorkgroups()), b.U32(studyWG))
	b.For(b.X(b.GlobalID()), n, stride, func(i codegen.Value) { b.Store(dst, i, b.Load(src, i)) })
	return b.Finish()
}

func measure(b *testing.B, p *runtime.Program, cpu bool) time.Duration {
	b.Helper()
	reps := 10
	if cpu {
		reps = 2
	}
	m, err := p.Measure(context.Background(), runtime.MeasureOptions{Warmup: 1, Reps: reps})
	if err != nil {
		b.Fatal(err)
	}
	return m.Median
}

func program(b *testing.B, d *runtime.Device, spec runtime.ProgramSpec) *runtime.Program {
	b.Helper()
	p, err := d.NewProgram(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

func us(t time.Duration) float64 { return float64(t.Nanoseconds()) / 1e3 }

// BenchmarkBarrierCost: the cost of a barrier between dependent dispatches against the work of
// each: compute-bound steps of W workgroups × iters multiply-adds, and memory-bound steps
// copying B bytes (chained: each copy reads the previous one's result).
func BenchmarkBarrierCost(b *testing.B) {
	d, cpu := studyDevice(b)
	busy := studyPipeline(b, d, func() (*codegen.Kernel, error) { return busyKernel(false) })
	cp := studyPipeline(b, d, copyKernelCG)
	K, groups, works, sizes := 64, []int{1, 16, 132, 528, 2112}, []int{8, 128, 2048}, []int64{64 << 10, 1 << 20, 8 << 20}
	if cpu {
		K, groups, works, sizes = 6, []int{1, 4}, []int{8, 64}, []int64{64 << 10}
	}
	for range b.N {
		for _, w := range groups {
			for _, it := range works {
				n := uint32(w * studyWG)
				slot := int64(n) * 4
				slot = (slot + 255) &^ 255
				x := studyBuffer(b, d, slot*int64(K))
				disp := func(off int64, iters int) runtime.Dispatch {
					return runtime.Dispatch{Pipeline: busy, Grid: [3]uint32{uint32(w), 1, 1}, Push: u32s(uint32(iters), n, 1, 0),
						Bindings: []runtime.Binding{{Buffer: x, Offset: off, Size: slot, Access: runtime.ReadWrite}}}
				}
				var chain, free []runtime.Dispatch
				for k := 0; k < K; k++ {
					chain = append(chain, disp(0, it))
					free = append(free, disp(int64(k)*slot, it))
				}
				pc := program(b, d, runtime.ProgramSpec{Dispatches: chain})
				pf := program(b, d, runtime.ProgramSpec{Dispatches: free})
				p1 := program(b, d, runtime.ProgramSpec{Dispatches: []runtime.Dispatch{disp(0, it*K)}})
				if s := pc.Stats(); s.Barriers != K-1 {
					b.Fatalf("chain: %d barriers, want %d", s.Barriers, K-1)
				}
				if s := pf.Stats(); s.Barriers != 0 {
					b.Fatalf("overlapped: %d barriers, want 0", s.Barriers)
				}
				tc, tf, t1 := measure(b, pc, cpu), measure(b, pf, cpu), measure(b, p1, cpu)
				cost := (tc - t1) / time.Duration(K-1)
				b.Logf("STUDY barrier, compute: %4d workgroups × %4d steps: %7.2f µs a step chained, %7.2f overlapped, %7.2f fused: a barrier adds %6.2f µs",
					w, it, us(tc)/float64(K), us(tf)/float64(K), us(t1)/float64(K), us(cost))
			}
		}
		for _, size := range sizes {
			n := uint32(size / 16)
			grid := uint32(min(int64(n+studyWG-1)/studyWG, 1024))
			a, c := studyBuffer(b, d, size), studyBuffer(b, d, size)
			big, bigOut := studyBuffer(b, d, size*int64(K)), studyBuffer(b, d, size*int64(K))
			cpy := func(src, dst *runtime.Buffer, off, sz int64) runtime.Dispatch {
				return runtime.Dispatch{Pipeline: cp, Grid: [3]uint32{grid, 1, 1}, Push: u32s(uint32(sz / 16)),
					Bindings: []runtime.Binding{{Buffer: src, Offset: off, Size: sz, Access: runtime.Read}, {Buffer: dst, Offset: off, Size: sz, Access: runtime.Write}}}
			}
			var chain, free []runtime.Dispatch
			for k := 0; k < K; k++ {
				if k%2 == 0 {
					chain = append(chain, cpy(a, c, 0, size))
				} else {
					chain = append(chain, cpy(c, a, 0, size))
				}
				free = append(free, cpy(big, bigOut, int64(k)*size, size))
			}
			pc := program(b, d, runtime.ProgramSpec{Dispatches: chain})
			pf := program(b, d, runtime.ProgramSpec{Dispatches: free})
			p1 := program(b, d, runtime.ProgramSpec{Dispatches: []runtime.Dispatch{{Pipeline: cp, Grid: [3]uint32{grid, 1, 1}, Push: u32s(uint32(size * int64(K) / 16)),
				Bindings: []runtime.Binding{{Buffer: big, Access: runtime.Read}, {Buffer: bigOut, Access: runtime.Write}}}}})
			tc, tf, t1 := measure(b, pc, cpu), measure(b, pf, cpu), measure(b, p1, cpu)
			cost := (tc - t1) / time.Duration(K-1)
			b.Logf("STUDY barrier, memory: copy %6d KiB (%d workgroups): %7.2f µs a step chained, %7.2f overlapped, %7.2f fused: a barrier adds %6.2f µs",
				size>>10, grid, us(tc)/float64(K), us(tf)/float64(K), us(t1)/float64(K), us(cost))
		}
	}
}

// BenchmarkRangeBarriers: the chain of BenchmarkBarrierCost with buffer memory barriers over the
// bytes each step wrote (runtime.ProgramSpec.RangeBarriers) against global memory barriers, for
// small and large steps, the written range a small part of a large buffer.
func BenchmarkRangeBarriers(b *testing.B) {
	d, cpu := studyDevice(b)
	busy := studyPipeline(b, d, func() (*codegen.Kernel, error) { return busyKernel(false) })
	K, groups := 128, []int{1, 132, 1056}
	if cpu {
		K, groups = 6, []int{1, 4}
	}
	for range b.N {
		for _, w := range groups {
			n := uint32(w * studyWG)
			slot := (int64(n)*4 + 255) &^ 255
			x := studyBuffer(b, d, slot*16) // the chain writes the first 1/16
			var chain []runtime.Dispatch
			for k := 0; k < K; k++ {
				chain = append(chain, runtime.Dispatch{Pipeline: busy, Grid: [3]uint32{uint32(w), 1, 1}, Push: u32s(8, n, 1, 0),
					Bindings: []runtime.Binding{{Buffer: x, Offset: 0, Size: slot, Access: runtime.ReadWrite}}})
			}
			pg := program(b, d, runtime.ProgramSpec{Dispatches: chain})
			pr := program(b, d, runtime.ProgramSpec{Dispatches: chain, RangeBarriers: true})
			// Interleaved, twice, so that a drift of the clock does not favour one.
			tg, tr := measure(b, pg, cpu), measure(b, pr, cpu)
			tg2, tr2 := measure(b, pg, cpu), measure(b, pr, cpu)
			tg, tr = min(tg, tg2), min(tr, tr2)
			b.Logf("STUDY range barriers: %4d workgroups: %7.2f µs a step with global barriers, %7.2f with buffer-range barriers (%.2fx)",
				w, us(tg)/float64(K), us(tr)/float64(K), float64(tg)/float64(tr))
		}
	}
}

// BenchmarkPersistentPhases: P phases of W workgroups each, as P dispatches with barriers between
// them (a chain) and as one persistent dispatch whose workgroups meet at a grid barrier between
// phases, against the fused floor (one dispatch, all the phases' work, no synchronisation). W is
// at most what the device holds at once (132 SMs on the H200, 256 invocations per workgroup);
// a grid that is not all resident would deadlock, so the spin gives up after a bound and the
// case is reported as not resident. The grid barrier's counts are checked after the runs.
func BenchmarkPersistentPhases(b *testing.B) {
	d, cpu := studyDevice(b)
	busy := studyPipeline(b, d, func() (*codegen.Kernel, error) { return busyKernel(false) })
	pers := studyPipeline(b, d, func() (*codegen.Kernel, error) { return busyKernel(true) })
	P, groups, works := 64, []int{66, 132, 264}, []int{8, 128, 1024}
	if cpu {
		P, groups, works = 6, []int{1}, []int{8}
	}
	const limit = 1 << 22
	for range b.N {
		for _, w := range groups {
			for _, it := range works {
				n := uint32(w * studyWG)
				size := (int64(n)*4 + 255) &^ 255
				x := studyBuffer(b, d, size)
				sync := studyBuffer(b, d, 256)
				if err := d.Upload(sync, 0, make([]byte, 16)); err != nil {
					b.Fatal(err)
				}
				step := func(iters, phases int, pl *runtime.Pipeline) runtime.Dispatch {
					bind := []runtime.Binding{{Buffer: x, Size: size, Access: runtime.ReadWrite}}
					if pl == pers {
						bind = append(bind, runtime.Binding{Buffer: sync, Size: 256, Access: runtime.ReadWrite})
					}
					return runtime.Dispatch{Pipeline: pl, Grid: [3]uint32{uint32(w), 1, 1}, Push: u32s(uint32(iters), n, uint32(phases), limit), Bindings: bind}
				}
				var chain []runtime.Dispatch
				for k := 0; k < P; k++ {
					chain = append(chain, step(it, 1, busy))
				}
				pc := program(b, d, runtime.ProgramSpec{Dispatches: chain})
				pp := program(b, d, runtime.ProgramSpec{Dispatches: []runtime.Dispatch{step(it, P, pers)}})
				p1 := program(b, d, runtime.ProgramSpec{Dispatches: []runtime.Dispatch{step(it*P, 1, busy)}})
				if err := pp.Run(context.Background(), nil, nil); err != nil {
					b.Fatal(err)
				}
				got := make([]byte, 12)
				if err := d.Download(sync, 0, got); err != nil {
					b.Fatal(err)
				}
				arrive, gen, gaveUp := binary.LittleEndian.Uint32(got), binary.LittleEndian.Uint32(got[4:]), binary.LittleEndian.Uint32(got[8:])
				if gaveUp > 0 {
					b.Logf("STUDY persistent: %4d workgroups: not all resident (%d waits gave up): no figure", w, gaveUp)
					continue
				}
				if arrive != 0 || gen != uint32(P-1) {
					b.Fatalf("grid barrier: after one run arrive=%d generation=%d, want 0 and %d", arrive, gen, P-1)
				}
				tc, tp, t1 := measure(b, pc, cpu), measure(b, pp, cpu), measure(b, p1, cpu)
				if err := d.Download(sync, 0, got); err != nil {
					b.Fatal(err)
				}
				if g := binary.LittleEndian.Uint32(got[8:]); g > 0 {
					b.Logf("STUDY persistent: %4d workgroups: %d waits gave up while measuring: no figure", w, g)
					continue
				}
				sync1 := func(t time.Duration) float64 { return us(t-t1) / float64(P-1) }
				b.Logf("STUDY persistent: %4d workgroups × %4d steps, %d phases: %7.2f µs a phase as dispatches with barriers, %7.2f persistent, %7.2f fused: a barrier costs %6.2f µs, a grid barrier %6.2f µs",
					w, it, P, us(tc)/float64(P), us(tp)/float64(P), us(t1)/float64(P), sync1(tc), sync1(tp))
			}
		}
	}
}
