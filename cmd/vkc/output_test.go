package main

import (
	"slices"
	"testing"
)

// TestCountingWriter: a plan's writing reports the bytes written each time another
// progressStep have passed, and passes every byte on.
func TestCountingWriter(t *testing.T) {
	var reports []uint64
	var sink countBytes
	c := &countingWriter{w: &sink, report: func(n uint64) { reports = append(reports, n) }}
	buf := make([]byte, 1<<20)
	for i := 0; i < 600; i++ {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if want := []uint64{256 << 20, 512 << 20}; !slices.Equal(reports, want) {
		t.Errorf("reports at %v, want %v", reports, want)
	}
	if sink != 600<<20 {
		t.Errorf("%d bytes passed on, want %d", sink, 600<<20)
	}
}

type countBytes int

func (c *countBytes) Write(b []byte) (int, error) { *c += countBytes(len(b)); return len(b), nil }
