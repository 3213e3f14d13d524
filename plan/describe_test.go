package plan

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadDescription: ReadDescription decodes everything but the weight data, which stays in
// the file as a piece read on demand (the same bytes ReadFile gives); a file whose header
// declares 8 GiB of weights (sparse on disk) is described without reading them, where ReadFile
// reads them all before the checksum fails (here: is refused by a host memory limit of 64 MiB).
func TestReadDescription(t *testing.T) {
	dir := t.TempDir()
	p := smallPlan()
	path := filepath.Join(dir, "p.plan")
	if err := p.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	full, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ReadDescription(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Weights.Data != nil || len(d.Weights.Pieces) != 1 || d.Model != full.Model || len(d.Functions) != len(full.Functions) {
		t.Fatalf("description: data %d bytes, %d pieces, model %q", len(d.Weights.Data), len(d.Weights.Pieces), d.Model)
	}
	got, err := d.Weights.Bytes()
	if err != nil || string(got) != string(full.Weights.Data) {
		t.Errorf("the description's weights read back: %v (%d bytes, want %d)", err, len(got), len(full.Weights.Data))
	}

	// The same plan, its header declaring 8 GiB of weight data, the file extended to match.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint32(b[12:])
	end := prefixSize + int(hlen) // the header CRC is b[end-4:end]; the weight entry the 16 bytes before
	oldLen := binary.LittleEndian.Uint64(b[end-16:])
	const huge = 8 << 30
	binary.LittleEndian.PutUint64(b[end-16:], huge)
	binary.LittleEndian.PutUint32(b[end-4:], crc32.Checksum(b[:end-4], castagnoli))
	sparse := filepath.Join(dir, "sparse.plan")
	if err := os.WriteFile(sparse, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, int64(len(b))-int64(oldLen)+huge); err != nil {
		t.Skipf("needs a sparse file of 8 GiB: %v", err)
	}
	t.Setenv("VKC_HOST_MEMORY", "64MiB")
	if _, err := ReadFile(sparse); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile of 8 GiB declared weights: %v, want the host memory limit", err)
	}
	_, err = ReadDescription(sparse)
	t.Logf("ReadDescription: %v", err)
	if err == nil || !strings.Contains(err.Error(), "weights") {
		// The region's size is the original's: the 8 GiB piece lies outside it.
		t.Errorf("ReadDescription: %v, want the weight region's inconsistency named", err)
	}
}
