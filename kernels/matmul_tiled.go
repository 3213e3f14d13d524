package kernels

import (
	"fmt"

	"github.com/vkc-project/vkc/codegen"
	"github.com/vkc-project/vkc/ir"
)

// MatmulTiled computes matmul, linear and rmsnorm_linear for many rows: each workgroup computes a
// tile_m × tile_n tile of C for one batch, staging tile_k-deep slices of A and B in shared memory
// (as f32, whatever their storage dtype); each invocation accumulates a micro_m × micro_n block of
// the tile in registers, rows ty + i·(tile_m/micro_m) and columns tx + j·(tile_n/micro_n), so that
// neighbouring invocations read neighbouring shared words and write neighbouring columns. The
// next tiles' loads are issued into registers before the current tiles are computed and stored
// to shared memory after, so global latency overlaps the arithmetic (on the H200 the kernel
// was latency-bound: 36 k-steps of a few hundred multiply-adds each).
//
// rmsnorm_linear needs no pre-pass: gamma is folded into the B tile as it is loaded, and every
// invocation sees each element of its rows of A across the k loop, so it sums their squares
// alongside the products and scales its accumulators by 1/rms at the end (micro_m extra
// multiply-adds per micro_m·micro_n). The normalised row is not rounded to x's dtype before the
// product as the unfused graph would; for f16 x the difference is within f16 tolerance.
//
// A block-quantized B (linear's W in any format of QuantizedDTypes, blocks along K) is
// dequantized as its tiles are staged: each element is decoded from its block exactly as ggml's
// dequantizer computes it (decodeElement), so the products are f32 arithmetic on ggml's values;
// the blocks are read as they are, never expanded in device memory.
//
// Specialization constants: tile_m, tile_n, tile_k, wg_x = tile_n/micro_n, wg_y = tile_m/micro_m
// (the workgroup size). The micro tile is unrolled at build time. Grid: ceil(N/tile_n) ×
// ceil(M/tile_m) × batches.
var MatmulTiled = &Template{
	Name:      "matmul_tiled",
	Quantized: QuantizedDTypes(),
	Accepts: func(p *Problem, caps Caps) error {
		g, err := acceptGemmQuant(p, caps)
		if err != nil {
			return err
		}
		if err := int8Claims(p, g, caps); err != nil {
			return err
		}
		if g.batches() > caps.MaxGroups[2] {
			return fmt.Errorf("%d batches exceed the device's %d workgroups in z", g.batches(), caps.MaxGroups[2])
		}
		if len(p.Parts) > 0 && (!caps.SubgroupShuffle || caps.SubgroupSize < 2 || caps.SubgroupSize%2 != 0) {
			return fmt.Errorf("column parts pair neighbouring invocations' columns by a subgroup shuffle, which the device lacks")
		}
		return nil
	},
	Space: NewSpace(
		Ints("tile_m", 64, 32, 16, 128),
		Ints("tile_n", 64, 32, 16, 128),
		Ints("tile_k", 16, 8, 32),
		Ints("micro_m", 4, 2, 1, 8, 16),
		Ints("micro_n", 4, 2, 1, 8, 16),
	).Where(tiledFits),
	Static: tiledStatic,
	Build:  buildMatmulTiled,
}

// tiledStatic is MatmulTiled's static choice on a CPU implementation for products of more than
// 64 rows and columns (a prompt's; none on a GPU, and none for smaller products, where the
// space's first point stays the default): 16×16 micro tiles of a 128×128 tile. Lavapipe runs
// invocations as the lanes of SIMD registers, and a read of shared memory at an address that
// differs between invocations is a loop over the lanes, one scalar load each; an invocation's
// micro_m·micro_n multiply-adds per k cost micro_m + micro_n such reads, so the products' rate
// grows with the micro tile (the registers it spills are cheap beside the reads). On SmolLM2's
// 128-token prefill products (BenchmarkTiledPoints, CPU time on lavapipe, one thread) it ran
// 3.2–4.3× (gate/up 128×3072×576) and 3.6× (down 128×576×1536) as fast as the first point (64×64
// of 4×4), and 1.6–1.9× as fast as 64×64 of 8×8 (llama.cpp's Vulkan backend takes 8×16 an
// invocation on this device). The cost is the driver's compile, seconds to tens of seconds of CPU
// a product cold (once per machine: Mesa caches it on disk), which is also why smaller products
// (tests', a short prefill's) keep the first point. 64×64 of 8×8 follows where the large tile
// does not fit.
func tiledStatic(p *Problem, caps Caps) []Config {
	if !caps.CPU {
		return nil
	}
	g, err := readGemm(p)
	if err != nil || g.m <= 64 || g.n <= 64 {
		return nil
	}
	pt := func(t, mi int) Config {
		return Config{"tile_m": t, "tile_n": t, "tile_k": 16, "micro_m": mi, "micro_n": mi}
	}
	return []Config{pt(128, 16), pt(64, 8)}
}

func init() {
	// Cache parts (column parts writing a state) stop at the run's rows.
	MatmulTiled.ReadsLength = true
	Register(MatmulTiled)
}

// tiledFits: the micro tile divides the tile, the workgroup is within the device's limits and at
// least a subgroup, and the two shared tiles fit in shared memory.
func tiledFits(p *Problem, c Config, caps Caps) error {
	tm, tn, tk, mm, mn := c["tile_m"], c["tile_n"], c["tile_k"], c["micro_m"], c["micro_n"]
	if tm%mm != 0 || tn%mn != 0 {
		return fmt.Errorf("micro tile %dx%d does not divide tile %dx%d", mm, mn, tm, tn)
	}
	wx, wy := tn/mn, tm/mm
	if wx*wy > caps.MaxInvocations || wx > caps.MaxWorkgroupSize[0] || wy > caps.MaxWorkgroupSize[1] {
		return fmt.Errorf("workgroup %dx%d exceeds the device's %d invocations", wx, wy, caps.MaxInvocations)
	}
	if wx*wy < max(caps.SubgroupSize, 1) {
		return fmt.Errorf("workgroup of %d invocations is smaller than a subgroup (%d)", wx*wy, caps.SubgroupSize)
	}
	if n := (tm + tn + 2) * tk * 4; n > caps.MaxSharedBytes {
		return fmt.Errorf("tiles need %d bytes of shared memory, the device has %d", n, caps.MaxSharedBytes)
	}
	return nil
}

func buildMatmulTiled(p *Problem, c Config, caps Caps) (*Launch, error) {
	g, err := acceptGemmQuant(p, caps)
	if err != nil {
		return nil, err
	}
	mm, mn := c["micro_m"], c["micro_n"]
	vals := map[string]int{
		"tile_m": c["tile_m"], "tile_n": c["tile_n"], "tile_k": c["tile_k"],
		"wg_x": c["tile_n"] / mn, "wg_y": c["tile_m"] / mm,
	}
	b := newBuilder(fmt.Sprintf("matmul_tiled_%dx%d", mm, mn), caps)
	bufs, binds := declareGemm(b, p, g, 1, 1)
	epi, eb := declareEpilogue(b, p, g.opType)
	binds = append(binds, eb...)

	spec := func(name string) codegen.Value { return b.Spec(name, codegen.U32, int64(vals[name])) }
	tm, tn, tk := spec("tile_m"), spec("tile_n"), spec("tile_k")
	wx, wy := spec("wg_x"), spec("wg_y")
	b.WorkgroupSize(wx, wy, b.U32(1))
	// Tiles are stored [k][m] and [k][n] with rows padded by one word: loads that walk k (A
	// row-major, B stored [N, K]) then store to different banks.
	tmp, tnp := b.Add(tm, b.U32(1)), b.Add(tn, b.U32(1))
	as := b.Shared("a_tile", codegen.F32, b.Mul(tk, tmp))
	bs := b.Shared("b_tile", codegen.F32, b.Mul(tk, tnp))
	u := func(x int) codegen.Value { return b.U32(uint32(x)) }
	M, N, K := u(g.m), u(g.n), u(g.k)

	lid := b.LocalID()
	tx, ty, li := b.X(lid), b.Y(lid), b.LocalIndex()
	wid := b.WorkgroupID()
	col0, row0, batch := b.Mul(b.X(wid), tn), b.Mul(b.Y(wid), tm), b.Z(wid)
	aBase := b.Mul(BroadcastIndex(b, batch, g.batch, g.aBatch), u(g.aMat))
	bBase := b.Mul(BroadcastIndex(b, batch, g.batch, g.bBatch), u(g.bMat))
	zero := b.F32(0)

	acc := make([][]*codegen.Var, mm)
	for i := range acc {
		acc[i] = make([]*codegen.Var, mn)
		for j := range acc[i] {
			acc[i][j] = b.Var(fmt.Sprintf("acc%d_%d", i, j), zero)
		}
	}
	rms := g.gammaArg >= 0
	ss := make([]*codegen.Var, mm)
	if rms {
		for i := range ss {
			ss[i] = b.Var(fmt.Sprintf("ss%d", i), zero)
		}
	}
	aT, bT := g.aT, g.bT
	var quantB quantRows
	if bT.Quantized() {
		quantB = newQuantRows(bT, g.k)
	}
	var gammaT ir.DType
	if rms {
		gammaT = p.Args[g.gammaArg].DType
	}
	// (r, kk) of A-tile element e, walking whichever axis is contiguous in memory, so that
	// consecutive invocations read consecutive addresses.
	aPos := func(e codegen.Value) (codegen.Value, codegen.Value) {
		if g.sam == 1 && g.m > 1 { // ta: m is contiguous
			return b.Rem(e, tm), b.Div(e, tm)
		}
		return b.Div(e, tk), b.Rem(e, tk)
	}
	bPos := func(e codegen.Value) (codegen.Value, codegen.Value) {
		if g.sbk == 1 && g.k > 1 { // tb / linear: k is contiguous
			return b.Rem(e, tk), b.Div(e, tk)
		}
		return b.Div(e, tn), b.Rem(e, tn)
	}
	threads := vals["wg_x"] * vals["wg_y"]
	// Tiles at depth k0, loaded from clamped indices (0 outside the matrices) so that no load
	// waits on a branch.
	aTotal := vals["tile_m"] * vals["tile_k"]
	aElem := func(k0 codegen.Value) func(e codegen.Value) codegen.Value {
		return func(e codegen.Value) codegen.Value {
			r, kk := aPos(e)
			gr, gk := b.Add(row0, r), b.Add(k0, kk)
			ok := b.And(b.Lt(gr, M), b.Lt(gk, K))
			i := b.Select(ok, b.Add(aBase, b.Add(b.Mul(gr, u(g.sam)), b.Mul(gk, u(g.sak)))), u(0))
			return b.Select(ok, LoadAs(b, bufs.a, i, aT), zero)
		}
	}
	// A quantized B is staged four k at a time: the four quants of a word share its block's
	// scales, decoded once (quadOf); tile_k and the tile's k0 are multiples of 4, as is K.
	quadPos := func(e codegen.Value) (codegen.Value, codegen.Value) {
		return b.Mul(b.Rem(e, b.Div(tk, u(4))), u(4)), b.Div(e, b.Div(tk, u(4)))
	}
	bTotal := vals["tile_k"] * vals["tile_n"]
	if bT.Quantized() {
		bTotal /= 4
	}
	bElem := func(k0 codegen.Value) func(e codegen.Value) codegen.Value {
		if bT.Quantized() {
			return func(e codegen.Value) codegen.Value {
				kk, n := quadPos(e)
				gk, gn := b.Add(k0, kk), b.Add(col0, n)
				ok := b.And(b.Lt(gk, K), b.Lt(gn, N))
				// W[n, k..k+3] dequantized exactly as ggml does (a 2-D weight: bBase is 0).
				w := quantB.quad(b, bufs.b, b.Select(ok, gn, u(0)), b.Select(ok, gk, u(0)))
				if rms {
					gi := b.Select(ok, gk, u(0))
					g4 := make([]codegen.Value, 4)
					for c := range g4 {
						g4[c] = LoadAs(b, bufs.gamma, b.Add(gi, u(c)), gammaT)
					}
					w = b.Mul(w, b.Vec(g4...))
				}
				return b.Select(b.Vec(ok, ok, ok, ok), w, b.Splat(zero, 4))
			}
		}
		return func(e codegen.Value) codegen.Value {
			kk, n := bPos(e)
			gk, gn := b.Add(k0, kk), b.Add(col0, n)
			ok := b.And(b.Lt(gk, K), b.Lt(gn, N))
			var w codegen.Value
			i := b.Select(ok, b.Add(bBase, b.Add(b.Mul(gk, u(g.sbk)), b.Mul(gn, u(g.sbn)))), u(0))
			if bT == ir.BF16 {
				w = bf16Word(b, bufs.b, i)
			} else {
				w = LoadAs(b, bufs.b, i, bT)
			}
			if rms {
				w = b.Mul(w, LoadAs(b, bufs.gamma, b.Select(ok, gk, u(0)), gammaT))
			}
			return b.Select(ok, w, zero)
		}
	}
	putA := func(e, v codegen.Value) {
		r, kk := aPos(e)
		b.Store(as, b.Add(b.Mul(kk, tmp), r), v)
	}
	putB := func(e, v codegen.Value) {
		if bT.Quantized() {
			kk, n := quadPos(e)
			for c := 0; c < 4; c++ {
				b.Store(bs, b.Add(b.Mul(b.Add(kk, u(c)), tnp), n), b.Extract(v, c))
			}
			return
		}
		kk, n := bPos(e)
		b.Store(bs, b.Add(b.Mul(kk, tnp), n), v)
	}
	// compute multiplies the staged tiles into the accumulators.
	compute := func() {
		b.For(u(0), tk, u(1), func(kk codegen.Value) {
			av := make([]codegen.Value, mm)
			for i := range av {
				av[i] = b.Load(as, b.Add(b.Mul(kk, tmp), b.Add(ty, b.Mul(u(i), wy))))
			}
			bv := make([]codegen.Value, mn)
			for j := range bv {
				bv[j] = b.Load(bs, b.Add(b.Mul(kk, tnp), b.Add(tx, b.Mul(u(j), wx))))
			}
			for i := range av {
				for j := range bv {
					b.Set(acc[i][j], b.Fma(av[i], bv[j], b.Get(acc[i][j])))
				}
				if rms {
					b.Set(ss[i], b.Fma(av[i], av[i], b.Get(ss[i])))
				}
			}
		})
	}
	if caps.CPU {
		// A CPU implementation runs an invocation's loads in order whatever the program's
		// order, so loading the next tiles during this one's products gains nothing there;
		// each tile is staged in a loop at the top of its step instead, once in the program,
		// where the GPU form writes every element's load and dequantization out twice (before
		// the loop and in it): 128×128 tiles of 16×16 took lavapipe 12–19 s to compile with an
		// f16 B and 24–38 s with a block-quantized one, 1.3–1.8 s so (BenchmarkTiledPoints,
		// BenchmarkTiledPointsQuant).
		b.For(u(0), K, tk, func(k0 codegen.Value) {
			b.Barrier()
			fa, fb := aElem(k0), bElem(k0)
			b.For(li, u(aTotal), u(threads), func(e codegen.Value) { putA(e, fa(e)) })
			b.For(li, u(bTotal), u(threads), func(e codegen.Value) { putB(e, fb(e)) })
			b.Barrier()
			compute()
		})
	} else {
		fetchTile(b, li, threads, aTotal, aElem(u(0))).put(b, putA)
		fetchTile(b, li, threads, bTotal, bElem(u(0))).put(b, putB)
		b.Barrier()
		b.For(u(0), K, tk, func(k0 codegen.Value) {
			// The next tiles' loads are issued now and land while this tile is computed (past
			// K they load zeros).
			next := b.Add(k0, tk)
			na, nb := fetchTile(b, li, threads, aTotal, aElem(next)), fetchTile(b, li, threads, bTotal, bElem(next))
			compute()
			b.Barrier()
			na.put(b, putA)
			nb.put(b, putB)
			b.Barrier()
		})
	}
	outBase := b.Mul(batch, u(g.m*g.n))
	// storeRow writes micro row i's results (row ty + i·wy of the tile): accOf(j) is its
	// accumulator of micro column j, s its sum of squares (rmsnorm_linear).
	storeRow := func(i codegen.Value, accOf func(j int) codegen.Value, s codegen.Value) {
		row := b.Add(row0, b.Add(ty, b.Mul(i, wy)))
		for j := 0; j < mn; j++ {
			col := b.Add(col0, b.Add(tx, b.Mul(u(j), wx)))
			if epi.paired() {
				// Columns col and col + 1 of a pair belong to invocations tx and tx + 1 (wg_x
				// and tile_n are even), neighbours in a subgroup: every invocation finishes its
				// value (the bias read at a clamped column) and trades it with its neighbour.
				v := g.finish(b, p, bufs, accOf(j), s, b.Min(col, b.Sub(N, u(1))))
				w := b.SubgroupShuffleXor(v, u(1))
				even := b.Eq(b.Rem(tx, u(2)), u(0))
				b.If(b.And(even, b.And(b.Lt(row, M), b.Lt(col, N))), func() { epi.storePair(b, row, col, v, w) })
				continue
			}
			b.If(b.And(b.Lt(row, M), b.Lt(col, N)), func() {
				v := g.finish(b, p, bufs, accOf(j), s, col)
				epi.store(b, b.Add(outBase, b.Add(b.Mul(row, N), col)), v)
			})
		}
	}
	var ssOf func(i int) codegen.Value
	if rms {
		ssOf = func(i int) codegen.Value { return b.Get(ss[i]) }
	} else {
		ssOf = func(int) codegen.Value { return codegen.Value{} }
	}
	if mm < loopEpilogueRows && !(caps.CPU && mm > 1) {
		for i := 0; i < mm; i++ {
			storeRow(u(i), func(j int) codegen.Value { return b.Get(acc[i][j]) }, ssOf(i))
		}
	} else {
		// A loop over the micro rows, each row's accumulators picked by a chain of selects:
		// one copy of the epilogue a micro column instead of one an element (16×16 copies of
		// column parts' rope and cache writes took lavapipe minutes to compile).
		pick := func(i codegen.Value, at func(i int) codegen.Value) codegen.Value {
			v := at(0)
			for r := 1; r < mm; r++ {
				v = b.Select(b.Eq(i, u(r)), at(r), v)
			}
			return v
		}
		b.For(u(0), u(mm), u(1), func(i codegen.Value) {
			var s codegen.Value
			if rms {
				s = pick(i, ssOf)
			}
			storeRow(i, func(j int) codegen.Value {
				return pick(i, func(r int) codegen.Value { return b.Get(acc[r][j]) })
			}, s)
		})
	}
	k, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if err := caps.Supports(k); err != nil {
		return nil, err
	}
	sp, err := specFor(k, vals)
	if err != nil {
		return nil, err
	}
	grid := [3]uint32{uint32(ceilDiv(g.n, c["tile_n"])), uint32(ceilDiv(g.m, c["tile_m"])), uint32(g.batches())}
	if int(grid[0]) > caps.MaxGroups[0] || int(grid[1]) > caps.MaxGroups[1] {
		return nil, fmt.Errorf("grid %v exceeds the device's limits %v", grid, caps.MaxGroups)
	}
	l := &Launch{Steps: []Step{{Kernel: k, Spec: sp, Grid: grid, Bindings: binds, Scale: g.scale(p, 1, c["tile_m"], 2)}}}
	g.cost(p, l)
	return l, nil
}

// loopEpilogueRows is the micro_m from which matmul_tiled stores its results in a loop over the
// micro rows rather than unrolled; on a CPU implementation it does from 2 (tinyllama's QKV
// product with rope and cache writes, 4×4 micro tiles: 1.96 s to compile on lavapipe, 0.56 s in
// a loop, and its prefill no slower: `vkc compare`, 30 pairs, 19 won by the loop, ratio 0.93).
const loopEpilogueRows = 8

func ceilDiv(a, b int) int { return (a + b - 1) / b }
