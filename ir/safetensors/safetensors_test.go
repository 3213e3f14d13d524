package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/ir"
)

func TestRoundTripAndOracle(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.safetensors")
	in := map[string]*ir.Tensor{
		"x": ir.TensorFromFloat64s(ir.T(ir.F32, 2, 3), []float64{1, 2, 3, 4, 5, 6}),
		"h": ir.TensorFromFloat64s(ir.T(ir.F16, 2), []float64{0.5, -2}),
		"i": ir.TensorFromFloat64s(ir.T(ir.I32), []float64{-7}),
	}
	if err := Write(p, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range in {
		w := out[k]
		if w == nil || !w.Type.Equal(v.Type) || string(w.Data) != string(v.Data) {
			t.Errorf("%s: got %v want %v", k, w, v)
		}
	}
	// The Hugging Face oracle file, written by another implementation.
	o, err := ReadAll("../../testdata/hf/tinyllama/golden.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if got := o["input_ids"].Type.String(); got != "i32[16]" {
		t.Errorf("input_ids is %s", got)
	}
}

func TestRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"short":   "abc",
		"hugelen": "\xff\xff\xff\xff\xff\xff\x00\x00{}",
		"notjson": "\x04\x00\x00\x00\x00\x00\x00\x00{{{{",
		"past":    "\x40\x00\x00\x00\x00\x00\x00\x00" + `{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}        `,
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(data), 0o644)
		_, err := Open(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: want an error naming the file, got %v", name, err)
		}
	}
}

// A shape whose element count overflows (wrapping to 0 bytes) is an error, not a tensor of no
// data; an offset past the file's end does not wrap either.
func TestRejectsOverflowingShapes(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ header, want string }{
		"wraps to 0":  {`{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, "has too many elements"},
		"huge offset": {`{"x":{"dtype":"F32","shape":[1],"data_offsets":[9223372036854775800,9223372036854775804]}}`, "past the end of the file"},
	} {
		h := tc.header
		for len(h)%8 != 0 {
			h += " "
		}
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		os.WriteFile(p, append(n[:], h...), 0o644)
		if _, err := Open(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}

// A tensor of a dtype vkc does not read (an i64 buffer in a checkpoint) does not stop the file
// from opening; reading that tensor names it and its dtype.
func TestUnsupportedDTypeOnlyWhenRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.safetensors")
	hdr := `{"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	b := make([]byte, 8, 8+len(hdr)+12)
	b[0] = byte(len(hdr))
	b = append(append(b, hdr...), make([]byte, 12)...)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer f.Close()
	if _, err := f.Read("w"); err != nil {
		t.Errorf("read w: %v", err)
	}
	if _, err := f.Read("ids"); err == nil || !strings.Contains(err.Error(), `"ids" has dtype I64`) {
		t.Errorf("read ids: got %v", err)
	}
}

// ReadAll refuses a file whose tensors are more than the host memory limit before reading them
// (a sparse file with a valid header is cheap to make and would be read whole).
func TestReadAllBeyondHostLimit(t *testing.T) {
	t.Setenv("VKC_HOST_MEMORY", "1MiB")
	h := `{"x":{"dtype":"F32","shape":[1024,1024],"data_offsets":[0,4194304]}}`
	for len(h)%8 != 0 {
		h += " "
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	p := filepath.Join(t.TempDir(), "sparse.safetensors")
	os.WriteFile(p, append(n[:], h...), 0o644)
	os.Truncate(p, int64(8+len(h))+4<<20)
	if _, err := ReadAll(p); err == nil || !strings.Contains(err.Error(), "1 tensors: 4.0 MiB (4194304 bytes) of host memory, more than the limit of 1.0 MiB") {
		t.Fatalf("got %v", err)
	}
}
