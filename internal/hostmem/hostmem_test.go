package hostmem

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{"1048576": 1 << 20, "512MiB": 512 << 20, "2 GiB": 2 << 30, "1.5GiB": 3 << 29, "64KB": 64 << 10, "7B": 7} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "lots", "-1MiB", "1e30TiB", "NaN"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) accepted", s)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Setenv(Env, "1MiB")
	if err := Check("x", 1<<20); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	err := Check("the weight region", 1<<20+1)
	if err == nil || !strings.Contains(err.Error(), "the weight region: 1.0 MiB (1048577 bytes) of host memory, more than the limit of 1.0 MiB (VKC_HOST_MEMORY=1MiB)") {
		t.Errorf("over the limit: %v", err)
	}
	t.Setenv(Env, "")
	if lim, why, err := Limit(); err != nil || lim == 0 || why == "" {
		t.Errorf("default limit %d (%s), %v", lim, why, err)
	}
}
