package plan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeSPIRV returns a word slice that starts like a SPIR-V module; Validate checks only the header.
func fakeSPIRV(n int, seed uint32) []uint32 {
	w := []uint32{spirvMagic, 0x00010300, 0, 100, 0}
	for i := 0; i < n; i++ {
		w = append(w, seed*2654435761+uint32(i))
	}
	return w
}

// smallPlan is a valid plan that uses every feature of the format: two modules, inline weights,
// state, inputs in staging and in the arena, run-time scalars, barriers and a record.
func smallPlan() *Plan {
	weights := make([]byte, 96)
	for i := range weights {
		weights[i] = byte(i * 7)
	}
	return &Plan{
		CompilerVersion: "vkc test",
		Model:           "tiny",
		Device: Fingerprint{VendorID: 0x10005, DeviceID: 0, DriverVersion: 0x1000, DeviceName: "llvmpipe",
			PipelineCacheUUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		Modules: []Module{
			{
				Key: "matvec/f32/64x16", Config: map[string]int64{"wg": 64, "rows": 2, "split_k": 1},
				SPIRV: fakeSPIRV(8, 1), Entry: "main",
				Bindings:         []BindingDecl{{0, Read}, {1, Read}, {2, Write}},
				PushConstantSize: 8,
				SpecConstants:    []SpecConstant{{0, 64}, {1, 0x3f800000}},
				Workgroup:        [3]uint32{64, 1, 1},
			},
			{
				Key: "cache_write/f32", SPIRV: fakeSPIRV(3, 2), Entry: "main",
				Bindings:         []BindingDecl{{0, Read}, {1, ReadWrite}},
				PushConstantSize: 4,
				Workgroup:        [3]uint32{32, 1, 1},
			},
		},
		Weights: Weights{
			Size: 96,
			Data: weights,
			Tensors: []WeightTensor{
				{Name: "w", DType: F32, Shape: []int64{4, 4}, Offset: 0, Size: 64},
				{Name: "b", DType: F16, Shape: []int64{16}, Offset: 64, Size: 32, Layout: "padded"},
			},
			Split: Split{64}, // two buffers: w, then b
		},
		State:     []StateTensor{{Name: "k_cache.0", DType: F32, Shape: []int64{8, 4}, Offset: 0}},
		StateSize: 128,
		Arena:     Arena{Size: 64, Align: 16, Split: Split{48}},
		Functions: []Function{
			{
				Name: "decode",
				Inputs: []Value{
					{Name: "x", DType: F32, Shape: []int64{4}, Place: Staging},
					{Name: "pos", DType: I32, Shape: nil, Place: Staging}, // a scalar; decoded empty lists are nil,
				},
				Outputs: []Value{{Name: "y", DType: F32, Shape: []int64{4}, Place: InArena, Offset: 16}},
				Dispatches: []Dispatch{
					{
						Module: 0,
						Bindings: []Binding{
							{0, BufferRef{Region{RegionWeights, 0}, 0, 64}},
							{1, BufferRef{Region{RegionInput, 0}, 0, 16}},
							{2, BufferRef{Region{RegionArena, 0}, 16, 16}},
						},
						Push:      []byte{4, 0, 0, 0, 0, 0, 0, 0},
						Scalars:   []ScalarSlot{{Offset: 4, Input: 1, Add: 1}},
						Grid:      [3]uint32{1, 1, 1},
						Ops:       []string{"linear"},
						Label:     "y = linear(x, w)",
						Estimated: 3 * time.Microsecond,
						Measured:  2500 * time.Nanosecond,
						Work:      Work{FLOPs: 32, Bytes: 96},
					},
					{
						Module: 1,
						Bindings: []Binding{
							{0, BufferRef{Region{RegionArena, 0}, 16, 16}},
							{1, BufferRef{Region{RegionState, 0}, 0, 128}},
						},
						Push:          []byte{0, 0, 0, 0},
						Scalars:       []ScalarSlot{{Offset: 0, Input: 1}},
						Grid:          [3]uint32{1, 1, 1},
						BarrierBefore: true,
						Ops:           []string{"cache_write"},
						Work: Work{FLOPs: -2, Bytes: 32, Terms: []WorkTerm{{Count: true, FLOPs: 3, Bytes: 16}},
							Count: &WorkCount{Inputs: []uint32{1}, Add: 1, Min: 1, Max: 8}},
					},
				},
				Ranges: []Range{{Input: 1, Min: 0, Max: 7, MinWhy: "cache_write of k_cache.0: a position is not negative",
					MaxWhy: "cache_write of k_cache.0: rows pos..pos+0 of 8"}},
			},
			{Name: "reset_noop"},
			{
				Name:   "prefill",
				Length: &Length{Name: "seq", Min: 1, Max: 4},
				Inputs: []Value{
					{Name: "x", DType: F32, Shape: []int64{4}, Place: Staging, Bounded: true},
					{Name: "pos", DType: I32, Shape: nil, Place: Staging},
				},
				Outputs: []Value{{Name: "y", DType: F32, Shape: []int64{4}, Place: Staging, Bounded: true}},
				Dispatches: []Dispatch{{
					Module: 0,
					Bindings: []Binding{
						{0, BufferRef{Region{RegionWeights, 0}, 0, 64}},
						{1, BufferRef{Region{RegionLength, 0}, 0, 4}},
						{2, BufferRef{Region{RegionOutput, 0}, 0, 16}},
					},
					Push:  make([]byte, 8),
					Grid:  [3]uint32{4, 1, 1},
					Scale: &GridScale{Axis: LinearAxis, Num: 1, Den: 1},
					Ops:   []string{"linear"},
				}},
				Ranges: []Range{{Input: 1, PlusLength: true, Min: NoMin, Max: 8, MaxWhy: "cache_write: rows pos..pos+seq of 8"}},
				Variants: []Function{{
					Name:   "prefill",
					Length: &Length{Name: "seq", Min: 1, Max: 1},
					Inputs: []Value{
						{Name: "x", DType: F32, Shape: []int64{1}, Place: Staging, Bounded: true},
						{Name: "pos", DType: I32, Shape: nil, Place: Staging},
					},
					Outputs: []Value{{Name: "y", DType: F32, Shape: []int64{1}, Place: Staging, Bounded: true}},
					Dispatches: []Dispatch{{
						Module: 0,
						Bindings: []Binding{
							{0, BufferRef{Region{RegionWeights, 0}, 0, 64}},
							{1, BufferRef{Region{RegionLength, 0}, 0, 4}},
							{2, BufferRef{Region{RegionOutput, 0}, 0, 4}},
						},
						Push: make([]byte, 8),
						Grid: [3]uint32{1, 1, 1},
						Ops:  []string{"linear"},
					}},
				}},
			},
		},
		Record: Record{
			Rules: []RuleCount{{"fuse-add-rmsnorm", 2}, {"matmul-assoc", 5}},
			Candidates: []Candidate{
				{Subject: "decode/linear", Kernel: "matvec/f32/64x16", Config: map[string]int64{"wg": 64}, Estimated: time.Microsecond, Measured: 900, Chosen: true},
				{Subject: "decode/linear", Kernel: "matvec/f32/64x16", Config: map[string]int64{"wg": 128}, Measured: 1200, Note: "slower"},
			},
			Notes:    []string{"tried split-k=2: no gain"},
			ChosenBy: ChosenMeasured,
		},
	}
}

// externalPlan is smallPlan with its weights in an external file of the given content.
func externalPlan(src []byte) *Plan {
	p := smallPlan()
	p.Weights.Data = nil
	p.Weights.Source = &Source{Path: "weights.bin", Size: uint64(len(src)), SHA256: sha256.Sum256(src)}
	p.Weights.Tensors[0].SourceOffset = 100
	p.Weights.Tensors[1] = WeightTensor{Name: "b", DType: F16, Shape: []int64{16}, Offset: 64, Size: 32, SourceOffset: 8}
	return p
}

// largePlan has many modules, functions and dispatches and a megabyte of inline weights.
func largePlan() *Plan {
	p := &Plan{CompilerVersion: "vkc large", Model: "large", Arena: Arena{Size: 1 << 20, Align: 256}}
	p.Weights.Size = 1 << 20
	p.Weights.Data = make([]byte, p.Weights.Size)
	for i := range p.Weights.Data {
		p.Weights.Data[i] = byte(i ^ i>>8)
	}
	for i := 0; i < 64; i++ {
		p.Weights.Tensors = append(p.Weights.Tensors, WeightTensor{Name: fmt.Sprintf("w%d", i), DType: F32,
			Shape: []int64{64, 64}, Offset: uint64(i) * 16384, Size: 16384})
		cfg := map[string]int64{}
		for k := 0; k < 8; k++ {
			cfg[fmt.Sprintf("p%d", (k*5+i)%8)] = int64(k * i)
		}
		p.Modules = append(p.Modules, Module{Key: fmt.Sprintf("k%d", i), Config: cfg, SPIRV: fakeSPIRV(1000, uint32(i)),
			Entry: "main", Bindings: []BindingDecl{{0, Read}, {1, Write}}, PushConstantSize: 16, Workgroup: [3]uint32{64, 1, 1}})
	}
	for f := 0; f < 4; f++ {
		fn := Function{Name: fmt.Sprintf("f%d", f),
			Inputs:  []Value{{Name: "in", DType: F16, Shape: []int64{1, 128}, Place: InArena, Offset: 0}},
			Outputs: []Value{{Name: "out", DType: F32, Shape: []int64{1, 64}, Place: Staging}}}
		for j := 0; j < 500; j++ {
			fn.Dispatches = append(fn.Dispatches, Dispatch{
				Module: uint32(j % 64),
				Bindings: []Binding{
					{0, BufferRef{Region{RegionWeights, 0}, uint64(j%64) * 16384, 16384}},
					{1, BufferRef{Region{RegionArena, 0}, uint64(j%16) * 4096, 4096}},
				},
				Push: make([]byte, 16), Grid: [3]uint32{uint32(j + 1), 2, 1}, BarrierBefore: true,
				Ops: []string{"matmul", "add"}, Measured: time.Duration(j),
			})
		}
		p.Functions = append(p.Functions, fn)
	}
	return p
}

func encode(t testing.TB, p *Plan) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := p.Encode(&buf); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

// streamOnly hides Len, so Decode takes the path for inputs of unknown size.
type streamOnly struct{ io.Reader }

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan *Plan
	}{
		{"empty", &Plan{}},
		{"small", smallPlan()},
		{"external", externalPlan(make([]byte, 1000))},
		{"large", largePlan()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := encode(t, tc.plan)
			for _, r := range []io.Reader{bytes.NewReader(b), streamOnly{bytes.NewReader(b)}} {
				got, err := Decode(r)
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if !reflect.DeepEqual(got, tc.plan) {
					t.Fatalf("round trip changed the plan:\n got %+v\nwant %+v", got, tc.plan)
				}
				if b2 := encode(t, got); !bytes.Equal(b, b2) {
					t.Fatalf("re-encoding the decoded plan gives different bytes (%d vs %d)", len(b2), len(b))
				}
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	// Maps iterate in random order; many keys make an unsorted encoding show up reliably.
	p := smallPlan()
	for i := 0; i < 50; i++ {
		p.Modules[0].Config[fmt.Sprintf("k%02d", i)] = int64(i)
	}
	first := encode(t, p)
	for i := 0; i < 20; i++ {
		if b := encode(t, p); !bytes.Equal(b, first) {
			t.Fatalf("encoding %d differs from the first", i)
		}
	}
	// An equal plan built separately encodes identically too.
	q := smallPlan()
	for i := 49; i >= 0; i-- {
		q.Modules[0].Config[fmt.Sprintf("k%02d", i)] = int64(i)
	}
	if !bytes.Equal(encode(t, q), first) {
		t.Fatal("equal plans encode differently")
	}
}

// TestFormatStable pins the bytes of smallPlan. If it fails, the file format changed: bump
// FormatVersion (old plans must be rejected as such, not misread) and update the digest.
func TestFormatStable(t *testing.T) {
	b := encode(t, smallPlan())
	got := fmt.Sprintf("%x", sha256.Sum256(b))
	const want = "cc09015acf60080ba88f0f0aac10c2656d29f206186f40abc163f3dd3fbb74ec"
	if got != want {
		t.Errorf("smallPlan encodes to %d bytes with SHA-256 %s, want %s", len(b), got, want)
	}
}

func TestTruncatedAtEveryByte(t *testing.T) {
	b := encode(t, smallPlan())
	for n := 0; n < len(b); n++ {
		for _, r := range []io.Reader{bytes.NewReader(b[:n]), streamOnly{bytes.NewReader(b[:n])}} {
			_, err := Decode(r)
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("truncated to %d of %d bytes: got %v, want ErrTruncated", n, len(b), err)
			}
		}
	}
	_, err := Decode(bytes.NewReader(b[:len(b)-1]))
	if !strings.Contains(err.Error(), "weightdata") || !strings.Contains(err.Error(), fmt.Sprint(len(b)-1)) {
		t.Errorf("message should name the section and where the input ends: %v", err)
	}
}

func TestSingleBitFlips(t *testing.T) {
	b := encode(t, smallPlan())
	kinds := map[error]int{}
	for i := 0; i < len(b)*8; i++ {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		_, err := Decode(bytes.NewReader(c))
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("bit %d flipped: got %v, want a *FormatError", i, err)
		}
		kinds[fe.Kind]++
	}
	// Flips in the magic are foreign, in the version unsupported, elsewhere corrupt (or, in the
	// header length, possibly truncated).
	for _, k := range []error{ErrForeign, ErrVersion, ErrCorrupt} {
		if kinds[k] == 0 {
			t.Errorf("no flip was reported as %v: %v", k, kinds)
		}
	}
}

func TestTrailingBytes(t *testing.T) {
	b := append(encode(t, smallPlan()), 0)
	for _, r := range []io.Reader{bytes.NewReader(b), streamOnly{bytes.NewReader(b)}} {
		if _, err := Decode(r); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "follow the last section") {
			t.Errorf("got %v, want an error about bytes after the last section", err)
		}
	}
}

func TestVersion(t *testing.T) {
	b := encode(t, smallPlan())
	for _, tc := range []struct {
		version uint32
		want    string
	}{
		{FormatVersion + 1, "format version 5 is newer than this vkc reads (version 4)"},
		{3, "format version 3 is not one this vkc reads (version 4); recompile the model"},
		{2, "format version 2 is not one this vkc reads (version 4); recompile the model"},
		{1, "format version 1 is not one this vkc reads (version 4); recompile the model"},
		{0xffffffff, "newer"},
		{0, "format version 0 is not one this vkc reads"},
	} {
		c := bytes.Clone(b)
		binary.LittleEndian.PutUint32(c[8:], tc.version)
		_, err := Decode(bytes.NewReader(c))
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("version %d: got %v, want ErrVersion mentioning %q", tc.version, err, tc.want)
		}
	}
}

func TestForeign(t *testing.T) {
	safetensors := binary.LittleEndian.AppendUint64(nil, 20)
	safetensors = append(safetensors, `{"__metadata__":{}}`...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"elf", []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00"), "ELF"},
		{"safetensors", safetensors, "safetensors"},
		{"gguf", []byte("GGUF\x03\x00\x00\x00"), "GGUF"},
		{"text", []byte("model: tinyllama\n"), `bad magic "model: t"`},
		{"short", []byte("x"), `bad magic "x"`},
	} {
		_, err := Decode(bytes.NewReader(tc.data))
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrForeign mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestReadFileNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.plan")
	b := encode(t, smallPlan())
	b[len(b)-1] ^= 0x80 // in the weight data
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(path)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "section weightdata") {
		t.Errorf("got %v, want a corrupt-plan error naming %s and the section", err, path)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.plan")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v", err)
	}
}

func TestWriteFileReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.bin")
	p := smallPlan()
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatal("ReadFile(WriteFile(p)) != p")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	assertDir(t, dir, "plan.bin")
}

// assertDir fails unless dir holds exactly the named files (no temporary files left behind).
func assertDir(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if fmt.Sprint(got) != fmt.Sprint(names) {
		t.Errorf("directory holds %v, want %v", got, names)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	boom := errors.New("disk on fire")
	failMidway := func(w io.Writer) error {
		w.Write(bytes.Repeat([]byte("partial"), 1<<18)) // more than the buffer: reaches the file
		return boom
	}
	t.Run("fails, no file", func(t *testing.T) {
		dir := t.TempDir()
		err := writeFileAtomic(filepath.Join(dir, "p.bin"), failMidway)
		if !errors.Is(err, boom) {
			t.Fatalf("got %v, want %v", err, boom)
		}
		assertDir(t, dir)
	})
	t.Run("fails, existing file kept", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "p.bin")
		old := encode(t, smallPlan())
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := writeFileAtomic(path, failMidway); !errors.Is(err, boom) {
			t.Fatalf("got %v, want %v", err, boom)
		}
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, old) {
			t.Fatalf("existing file changed (err %v)", err)
		}
		assertDir(t, dir, "p.bin")
	})
	t.Run("invalid plan, existing file kept", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "p.bin")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		bad := smallPlan()
		bad.Functions[0].Dispatches[0].Module = 9
		err := bad.WriteFile(path)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), path) {
			t.Fatalf("got %v, want ErrInvalid naming %s", err, path)
		}
		if b, _ := os.ReadFile(path); string(b) != "old" {
			t.Fatalf("existing file changed to %q", b)
		}
		assertDir(t, dir, "p.bin")
	})
	t.Run("missing directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := smallPlan().WriteFile(filepath.Join(dir, "no", "p.bin")); err == nil {
			t.Fatal("writing into a missing directory succeeded")
		}
		assertDir(t, dir)
	})
	t.Run("replaces a plan, not another file unless forced", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "p.bin")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := smallPlan().WriteFile(path); err == nil || !strings.Contains(err.Error(), "is not a plan") {
			t.Fatalf("replacing a non-plan: got %v", err)
		}
		if err := smallPlan().WriteFileContext(context.Background(), path, WriteOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		other := largePlan()
		if err := other.WriteFile(path); err != nil {
			t.Fatal(err)
		}
		if err := smallPlan().WriteFile(path); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); !bytes.Equal(b, encode(t, smallPlan())) {
			t.Fatal("file does not hold the new plan")
		}
		assertDir(t, dir, "p.bin")
	})
}

func TestCheckDevice(t *testing.T) {
	p := smallPlan()
	same := p.Device
	same.DeviceName = "renamed" // names are not compared
	if err := p.CheckDevice(same); err != nil {
		t.Errorf("same device: %v", err)
	}
	other := Fingerprint{VendorID: 0x10de, DeviceID: 0x2335, DriverVersion: 0x1000, DeviceName: "NVIDIA H200"}
	err := p.CheckDevice(other)
	var me *DeviceMismatchError
	if !errors.As(err, &me) {
		t.Fatalf("got %v, want a *DeviceMismatchError", err)
	}
	for _, want := range []string{`"llvmpipe"`, `"NVIDIA H200"`, "0x10de", "vendor, device, pipeline cache differ"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if me.DriverOnly() {
		t.Error("DriverOnly for a different vendor")
	}
	newer := p.Device
	newer.DriverVersion++
	err = p.CheckDevice(newer)
	if !errors.As(err, &me) || !me.DriverOnly() || !strings.Contains(err.Error(), "(driver differs)") {
		t.Errorf("driver update: got %v, want a driver-only mismatch", err)
	}
}

func TestLoadWeights(t *testing.T) {
	dir := t.TempDir()
	src := make([]byte, 200)
	for i := range src {
		src[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	p := externalPlan(src)
	planPath := filepath.Join(dir, "p.bin")
	region, err := p.LoadWeights(planPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(region[0:64], src[100:164]) || !bytes.Equal(region[64:96], src[8:40]) {
		t.Error("region does not hold the tensors' source bytes")
	}
	src[150] ^= 1
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.LoadWeights(planPath); err == nil || !strings.Contains(err.Error(), "changed since the plan was compiled") {
		t.Errorf("modified source: got %v", err)
	}
	if got, err := smallPlan().LoadWeights(planPath); err != nil || len(got) != 96 {
		t.Errorf("inline: got %d bytes, %v", len(got), err)
	}
}

func TestDTypeBytes(t *testing.T) {
	for _, tc := range []struct {
		t     DType
		shape []int64
		want  int64
		err   string
	}{
		{F32, nil, 4, ""},
		{F16, []int64{2, 3}, 12, ""},
		{BF16, []int64{0, 5}, 0, ""},
		{Q8_0, []int64{2, 32}, 68, ""},
		{Q4_K, []int64{512}, 288, ""},
		{Q8_0, []int64{33}, 0, "multiple of 32"},
		{Q8_0, []int64{32, 2}, 0, "last axis"},
		{Q6_K, []int64{3, 256}, 630, ""},
		{Q4_0, []int64{64}, 36, ""},
		{I32, []int64{-1}, 0, "negative"},
		{U32, []int64{1 << 40, 1 << 40}, 0, "too many elements"},
		{DType(99), []int64{1}, 0, "unknown dtype"},
	} {
		got, err := tc.t.Bytes(tc.shape)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v%v: got %d, %v; want error %q", tc.t, tc.shape, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%v%v: got %d, %v; want %d", tc.t, tc.shape, got, err, tc.want)
		}
	}
	for t0 := range dtypeInfo {
		if back, ok := ParseDType(t0.String()); !ok || back != t0 {
			t.Errorf("ParseDType(%q) = %v, %v", t0, back, ok)
		}
	}
}

func TestSummary(t *testing.T) {
	var buf bytes.Buffer
	if err := smallPlan().Summary(&buf); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, want := range []string{
		`plan for model "tiny"`,
		"weights        96 B  2 tensors (inline), in 2 buffers (64 B, 32 B)",
		"state         128 B  1 tensors\n",
		"arena          64 B  aligned to 16, in 2 buffers (48 B, 16 B)",
		"device        356 B  in all with 68 B of input and output slots, 5 allocations, the largest 128 B",
		"function decode: 2 dispatches, 1 barriers, estimated 3µs, measured 2.5µs",
		"inputs:  x f32[4] (staging), pos i32[] (staging)",
		"outputs: y f32[4] (arena@16)",
		"1  |  cache_write/f32   1x1x1  cache_write",
		"config rows=2 split_k=1 wg=64",
		"used 1 times",
		"rules applied: 2 rules, 7 applications",
		"candidates: 2 considered, 1 chosen",
		"tried split-k=2: no gain",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	var again bytes.Buffer
	smallPlan().Summary(&again)
	if again.String() != s {
		t.Error("summary is not deterministic")
	}
}

// TestDecodeBoundsAllocation gives the decoder a file whose header claims a terabyte of weight data
// but which ends right after the header: it must fail as truncated (its size known) or too large
// (a stream, such as a pipe, whose claim exceeds the host memory limit) without allocating the
// claim.
func TestDecodeBoundsAllocation(t *testing.T) {
	b := encode(t, &Plan{})
	hlen := binary.LittleEndian.Uint32(b[12:])
	end := prefixSize + int(hlen) - 4
	// The weight data section is the last table entry: id, length, crc before the header CRC.
	binary.LittleEndian.PutUint64(b[end-12:], 1<<40)
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	for _, sized := range []bool{true, false} {
		var r io.Reader = bytes.NewReader(b)
		if !sized {
			r = streamOnly{r}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Decode(r)
		runtime.ReadMemStats(&after)
		switch {
		case sized && (!errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "section weightdata needs")):
			t.Errorf("sized: got %v, want ErrTruncated for section weightdata", err)
		case !sized && (!errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1.0 TiB (1099511627")):
			t.Errorf("streamed: got %v, want ErrTooLarge naming the terabyte", err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
			t.Errorf("sized=%v: decoding a %d-byte input allocated %d bytes", sized, len(b), n)
		}
	}
}

// TestReadFileBoundsBySize: a sparse 30 GiB file whose valid header declares its 30 GiB, and a
// pipe that would stream as much, are refused before anything past the header is read, with the
// limit set low (VKC_HOST_MEMORY) so the test does not depend on the machine.
func TestReadFileBoundsBySize(t *testing.T) {
	t.Setenv("VKC_HOST_MEMORY", "64MiB")
	b := encode(t, &Plan{})
	hlen := binary.LittleEndian.Uint32(b[12:])
	end := prefixSize + int(hlen) - 4
	const claim = 30 << 30
	binary.LittleEndian.PutUint64(b[end-12:], claim)
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	path := filepath.Join(t.TempDir(), "sparse.plan")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(b))+claim); err != nil {
		t.Skipf("no sparse files here: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFile(path)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "30.0 GiB") || !strings.Contains(err.Error(), "VKC_HOST_MEMORY=64MiB") || !strings.Contains(err.Error(), path) {
		t.Errorf("sparse file: got %v, want ErrTooLarge naming the file, 30 GiB and the limit", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Errorf("reading the sparse file allocated %d bytes", n)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		w.Write(b)
		zeros := make([]byte, 1<<20)
		for {
			if _, err := w.Write(zeros); err != nil {
				w.Close()
				return
			}
		}
	}()
	_, err = ReadFile(fmt.Sprintf("/dev/fd/%d", r.Fd()))
	r.Close()
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("pipe: got %v, want ErrTooLarge", err)
	}
}

// TestTruncationMessageDoesNotWrap: a section length near 2^64 is reported as that many bytes
// from where it starts, not as a wrapped range ("bytes 192..191").
func TestTruncationMessageDoesNotWrap(t *testing.T) {
	b := encode(t, &Plan{})
	hlen := binary.LittleEndian.Uint32(b[12:])
	end := prefixSize + int(hlen) - 4
	binary.LittleEndian.PutUint64(b[end-12:], 1<<64-10)
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	_, err := Decode(bytes.NewReader(b))
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "section weightdata needs 18446744073709551606 bytes from byte") {
		t.Errorf("got %v", err)
	}
}
