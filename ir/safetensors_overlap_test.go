package ir

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSafetensorsOverlap: a header whose tensors share bytes is refused, naming both.
func TestSafetensorsOverlap(t *testing.T) {
	hdr := `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(append(b, hdr...), make([]byte, 24)...)
	p := filepath.Join(t.TempDir(), "o.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSafetensors(p); err == nil || !strings.Contains(err.Error(), `tensors "a" (bytes 117..133) and "b" (bytes 125..141) overlap`) {
		t.Errorf("overlapping tensors: %v", err)
	}
}
