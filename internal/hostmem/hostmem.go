// Package hostmem bounds what vkc allocates in host memory for one purpose: a model's
// parameters, a plan read from a file, the weight region of a plan being compiled, an
// intermediate of the interpreter. Go's runtime ends the process with a fatal error (a stack
// trace, exit status 2) when an allocation cannot be satisfied, so sizes that come from a file or
// a model are compared with the limit first and refused with an error that names them.
//
// The limit is VKC_HOST_MEMORY when set (bytes, with an optional KiB, MiB, GiB or TiB suffix:
// "512MiB"), else three quarters of the machine's physical memory (/proc/meminfo's MemTotal),
// else unlimited when that is unknown.
package hostmem

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Env is the environment variable that overrides the limit.
const Env = "VKC_HOST_MEMORY"

var (
	physOnce sync.Once
	phys     uint64
)

// physical is MemTotal in bytes, or 0 when unknown.
func physical() uint64 {
	physOnce.Do(func() {
		f, err := os.Open("/proc/meminfo")
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
					phys = kb << 10
				}
				return
			}
		}
	})
	return phys
}

// Limit returns the limit in bytes and where it comes from, for messages. A limit that cannot be
// determined is math.MaxUint64. A VKC_HOST_MEMORY that is not a size is an error (it must not
// silently mean another limit).
func Limit() (uint64, string, error) {
	if s := os.Getenv(Env); s != "" {
		n, err := ParseSize(s)
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", Env, err)
		}
		return n, Env + "=" + s, nil
	}
	if p := physical(); p > 0 {
		return p / 4 * 3, fmt.Sprintf("3/4 of the %s of physical memory; %s overrides", Size(p), Env), nil
	}
	return math.MaxUint64, "physical memory unknown", nil
}

// Check returns nil when need bytes fit the limit, else an error naming what needs them ("the
// weight region") and both sizes.
func Check(what string, need uint64) error {
	limit, why, err := Limit()
	if err != nil {
		return err
	}
	if need <= limit {
		return nil
	}
	return fmt.Errorf("%s: %s (%d bytes) of host memory, more than the limit of %s (%s)", what, Size(need), need, Size(limit), why)
}

// ParseSize reads "1048576", "512MiB", "2 GiB", "1.5GiB" (binary units; KB, MB, GB, TB are read
// the same way).
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := float64(1)
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*mult >= math.MaxUint64 {
		return 0, fmt.Errorf("%q is not a size in bytes (e.g. 512MiB)", s)
	}
	return uint64(v * mult), nil
}

// Size prints n bytes with a binary unit: "1.5 GiB".
func Size(n uint64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
