//go:build linux

package vkc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/gguf"
)

// llamaShape is a Llama's dimensions.
type llamaShape struct {
	vocab, d, layers, heads, kvHeads, ffn, ctx int
	theta                                      float32
}

// llama8B are Llama 3.1 8B's dimensions (its config.json): the shape of the GGUF files people
// run.
var llama8B = llamaShape{128256, 4096, 32, 32, 8, 14336, 131072, 500000}

// BenchmarkCompile8B measures the static compile, for lavapipe's limits with 16 GiB of device
// memory (device-free), of a GGUF file of Llama 3.1 8B's dimensions: random weights written as F16 and quantized to Q4_K_M by llama.cpp's
// own llama-quantize (from ../shared/peers/llamacpp's kit, or $LLAMA_KIT), about 4.6 GiB. The file is made once
// in a cache folder outside the repository ($VKC_BENCH_CACHE, else the user cache folder's
// vkc/bench-8b; the 16 GiB F16 file is deleted once quantized) and reused. Each round imports the
// file (memory-mapped), compiles prefill and decode and writes the plan; it reports the median
// compile time (import to plan in memory), plan write time, peak RSS against the file's size
// (the weights must be mapped and streamed, never copied: target ≤ 0.5×) and the plan's size
// against the file plus the SPIR-V (target ≤ 1.01×). It is skipped, saying why, without the
// kit, without 22 GiB of free disk to make the file (6 GiB once made) or 3 GiB of available
// memory. VKC_BENCH_8B_QUANTS="Q4_K_M Q8_0" makes a Q8_0 file beside it (scripts/gpu-bench.sh's
// big8b part runs vkc and llama-bench on both). Making the file takes minutes; run it with a long timeout:
//
//	go test -run '^$' -bench Compile8B -benchtime 1x -timeout 2h .
func BenchmarkCompile8B(b *testing.B) {
	path := llama8BQ4KM(b)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	file := uint64(st.Size())
	dir := b.TempDir()
	if free, err := freeDisk(dir); err == nil && free < file+file/8 {
		b.Skipf("the plan needs %s of free disk in %s; there are %s", size(file+file/8), dir, size(free))
	}
	if avail, err := availableMemory(); err == nil && avail < 3<<30 {
		b.Skipf("needs 3 GiB of available memory; there are %s", size(avail))
	}
	// Lavapipe's limits (2 GiB allocations, 128 MiB storage buffers: the weights in many buffers),
	// but the device memory of a GPU that holds the model: Debian 12's lavapipe as kernels.Lavapipe
	// describes it has a heap of 2 GiB, which the 5.4 GiB plan exceeds (the compile refuses it,
	// as it should for that device).
	target := LavapipeTarget
	target.Caps.DeviceMemory = 16 << 30
	planPath := filepath.Join(dir, "model.plan")
	var compiles, writes []time.Duration
	var peaks []uint64
	var planSize, spirv uint64
	for b.Loop() {
		goruntime.GC()
		debug.FreeOSMemory()
		reset := resetPeakRSS() == nil
		t0 := time.Now()
		m, err := importer.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		p, _, err := Compile(context.Background(), m, Options{Target: &target})
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
		spirv = 0
		for _, mod := range p.Modules {
			spirv += 4 * uint64(len(mod.SPIRV))
		}
		if st, err := os.Stat(planPath); err == nil {
			planSize = uint64(st.Size())
		}
		b.Logf("weights %s in %d buffers (file %s); plan %s", size(p.Weights.Size), p.Weights.Split.Buffers(), size(file), size(planSize))
		m.Close()
		compiles, writes = append(compiles, t1.Sub(t0)), append(writes, t2.Sub(t1))
	}
	b.ReportMetric(median(compiles).Seconds(), "compile-s")
	b.ReportMetric(median(writes).Seconds(), "write-s")
	if len(peaks) > 0 {
		slices.Sort(peaks)
		peak := peaks[len(peaks)/2]
		b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(float64(peak)/float64(file), "RSS/file")
	} else {
		b.Log("peak RSS not measured: /proc/self/clear_refs cannot reset the high-water mark here")
	}
	b.ReportMetric(float64(file)/(1<<20), "file-MiB")
	b.ReportMetric(float64(planSize)/(1<<20), "plan-MiB")
	b.ReportMetric(float64(planSize)/float64(file+spirv), "plan/(file+SPIR-V)")
}

// llama8BQ4KM returns the path of the cached Q4_K_M file, making it first if needed (or skips
// the benchmark, saying what is missing).
func llama8BQ4KM(b *testing.B) string {
	dir := os.Getenv("VKC_BENCH_CACHE")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			b.Skipf("no cache folder for the 8B file (set VKC_BENCH_CACHE): %v", err)
		}
		dir = filepath.Join(c, "vkc", "bench-8b")
	}
	// The quantizations to make: Q4_K_M, and those VKC_BENCH_8B_QUANTS names besides (the GPU
	// benchmark asks for "Q4_K_M Q8_0").
	quants := []string{"Q4_K_M"}
	for _, x := range strings.Fields(os.Getenv("VKC_BENCH_8B_QUANTS")) {
		if !slices.Contains(quants, x) {
			quants = append(quants, x)
		}
	}
	name := func(q string) string { return filepath.Join(dir, "llama-3.1-8b-shape-random-"+q+".gguf") }
	q := name("Q4_K_M")
	var missing []string
	for _, x := range quants {
		if _, err := os.Stat(name(x)); err != nil {
			missing = append(missing, x)
		}
	}
	if len(missing) == 0 {
		return q
	}
	kitDir := os.Getenv("LLAMA_KIT") // the GPU benchmark's copy of the kit
	if kitDir == "" {
		kitDir = filepath.Join("..", "shared", "peers", "llamacpp")
	}
	kit, _ := filepath.Abs(filepath.Join(kitDir, "llamacpp-vulkan-bin.tar.xz"))
	if _, err := os.Stat(kit); err != nil {
		b.Skipf("needs llama.cpp's llama-quantize from %s to make the 8B Q4_K_M file: %v", kit, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Skipf("cache folder %s: %v", dir, err)
	}
	disk := uint64(17 << 30) // the F16 file
	for _, x := range missing {
		disk += map[bool]uint64{true: 9 << 30, false: 5 << 30}[x == "Q8_0"]
	}
	if free, err := freeDisk(dir); err == nil && free < disk {
		b.Skipf("making the 8B files %v needs %s of free disk in %s (16 GiB of F16, then the quantized files); there are %s", missing, size(disk), dir, size(free))
	}
	quantize := filepath.Join(dir, "bin", "llama-quantize")
	if _, err := os.Stat(quantize); err != nil {
		b.Logf("unpacking %s into %s", kit, dir)
		if out, err := exec.Command("tar", "-xJf", kit, "-C", dir).CombinedOutput(); err != nil {
			b.Skipf("unpacking llama.cpp's kit: %v: %s", err, out)
		}
	}
	f16 := name("F16")
	t0 := time.Now()
	if _, err := os.Stat(f16); err != nil {
		if err := writeLlamaF16(f16+".tmp", llama8B); err != nil {
			os.Remove(f16 + ".tmp")
			b.Fatal(err)
		}
		if err := os.Rename(f16+".tmp", f16); err != nil {
			b.Fatal(err)
		}
		b.Logf("wrote %s in %v", f16, time.Since(t0).Round(time.Second))
	}
	for _, x := range missing {
		t0 = time.Now()
		tmp := name(x) + ".tmp"
		cmd := exec.Command(quantize, f16, tmp, x, fmt.Sprint(goruntime.NumCPU()))
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			b.Fatalf("llama-quantize %s: %v\n%s", x, err, tail(out, 2000))
		}
		if err := os.Rename(tmp, name(x)); err != nil {
			b.Fatal(err)
		}
		b.Logf("quantized to %s in %v", name(x), time.Since(t0).Round(time.Second))
	}
	os.Remove(f16)
	return q
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// writeLlamaF16 writes an F16 GGUF of a Llama of shape c with random weights (uniform in ±0.05,
// from a xorshift generator seeded per tensor) and norms of ones, streaming it to path (16 GiB
// for Llama 3.1 8B; no tensor is held in memory). Its metadata is what llama-quantize and vkc's
// importer read; the tokenizer is a dummy one of the vocabulary's size.
func writeLlamaF16(path string, c llamaShape) error {
	hd := c.d / c.heads
	var gb gguf.Builder
	add := func(k string, v any) { gb.Add(k, gguf.MustValue(v)) }
	add("general.architecture", "llama")
	add("general.name", "llama-3.1-8b-shape-random")
	add("general.file_type", uint32(1)) // mostly F16
	add("llama.context_length", uint32(c.ctx))
	add("llama.embedding_length", uint32(c.d))
	add("llama.block_count", uint32(c.layers))
	add("llama.feed_forward_length", uint32(c.ffn))
	add("llama.attention.head_count", uint32(c.heads))
	add("llama.attention.head_count_kv", uint32(c.kvHeads))
	add("llama.rope.freq_base", c.theta)
	add("llama.rope.dimension_count", uint32(hd))
	add("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	add("llama.vocab_size", uint32(c.vocab))
	add("tokenizer.ggml.model", "none")
	toks := make([]string, c.vocab)
	for i := range toks {
		toks[i] = fmt.Sprintf("<t%d>", i)
	}
	add("tokenizer.ggml.tokens", toks)
	type tensor struct {
		name string
		ne   []uint64
		f32  bool
	}
	var ts []tensor
	mat := func(name string, rows, cols int) {
		ts = append(ts, tensor{name, []uint64{uint64(cols), uint64(rows)}, false})
	}
	vec := func(name string, n int) { ts = append(ts, tensor{name, []uint64{uint64(n)}, true}) }
	mat("token_embd.weight", c.vocab, c.d)
	for i := range c.layers {
		p := fmt.Sprintf("blk.%d.", i)
		vec(p+"attn_norm.weight", c.d)
		mat(p+"attn_q.weight", c.heads*hd, c.d)
		mat(p+"attn_k.weight", c.kvHeads*hd, c.d)
		mat(p+"attn_v.weight", c.kvHeads*hd, c.d)
		mat(p+"attn_output.weight", c.d, c.heads*hd)
		vec(p+"ffn_norm.weight", c.d)
		mat(p+"ffn_gate.weight", c.ffn, c.d)
		mat(p+"ffn_up.weight", c.ffn, c.d)
		mat(p+"ffn_down.weight", c.d, c.ffn)
	}
	vec("output_norm.weight", c.d)
	mat("output.weight", c.vocab, c.d)
	bytesOf := func(t tensor) uint64 {
		n := uint64(1)
		for _, d := range t.ne {
			n *= d
		}
		if t.f32 {
			return 4 * n
		}
		return 2 * n
	}
	// The header: the builder's encoding with empty data, whose tensor offsets are then those of
	// the real sizes (data is aligned to 32 bytes; every size here is a multiple).
	for _, t := range ts {
		typ := uint32(1) // F16
		if t.f32 {
			typ = 0
		}
		gb.Tensor(t.name, typ, t.ne, nil)
	}
	head, err := gb.Bytes()
	if err != nil {
		return err
	}
	var names []string
	var ranks []int
	for _, t := range ts {
		names, ranks = append(names, t.name), append(ranks, len(t.ne))
	}
	head, err = patchOffsets(head, names, ranks, func(i int) uint64 { return bytesOf(ts[i]) })
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 8<<20)
	if _, err := w.Write(head); err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	for i, t := range ts {
		n := bytesOf(t)
		s := uint64(i)*0x9E3779B97F4A7C15 + 1
		for done := uint64(0); done < n; {
			k := min(uint64(len(buf)), n-done)
			if t.f32 {
				for j := uint64(0); j < k; j += 4 {
					binary.LittleEndian.PutUint32(buf[j:], math.Float32bits(1))
				}
			} else {
				for j := uint64(0); j < k; j += 2 {
					s ^= s << 13
					s ^= s >> 7
					s ^= s << 17
					v := (float32(s>>40)/(1<<24)*2 - 1) * 0.05
					binary.LittleEndian.PutUint16(buf[j:], ir.F16Bits(v))
				}
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			done += k
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// patchOffsets rewrites the data offsets of a GGUF header written with empty tensors (all 0):
// the tensors named, of the given ranks, in order, get the offsets of data of the given sizes,
// each a multiple of the 32-byte alignment. A tensor info is its name (u64 length, bytes), its
// rank (u32), its dims (u64 each), its type (u32) and its offset (u64).
func patchOffsets(head []byte, names []string, ranks []int, sizeOf func(i int) uint64) ([]byte, error) {
	out := slices.Clone(head)
	off, pos := uint64(0), 0
	for i, name := range names {
		key := binary.LittleEndian.AppendUint64(nil, uint64(len(name)))
		key = append(key, name...)
		k := bytes.Index(out[pos:], key)
		if k < 0 {
			return nil, fmt.Errorf("tensor %s not found in the header", name)
		}
		at := pos + k + len(key) + 4 + 8*ranks[i] + 4
		binary.LittleEndian.PutUint64(out[at:], off)
		off += sizeOf(i)
		pos = at + 8
	}
	return out, nil
}
