package server

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The metrics are written in Prometheus' text exposition format (version 0.0.4) by this file
// rather than through the Prometheus client library. What the server exports is a dozen fixed
// families (counters, gauges and histograms, few labels); the library would add itself and five
// modules (its common and client_model packages, protobuf, procfs, x/sys) to the vkc binary for
// them. The format is small and stable: a # HELP and # TYPE line per family, one line per
// sample, histograms as cumulative _bucket{le} series ending at +Inf with _sum and _count. The
// tests read /metrics back with the Prometheus project's own parser (prometheus/common/expfmt,
// a test-only dependency), so what this writes is checked by the reference reader, not by itself.

// metrics holds the server's metrics; safe for concurrent use.
type metrics struct {
	mu       sync.Mutex
	counters map[string]*counterFamily
	hists    map[string]*histogram
	order    []string                  // family names in registration order
	gauges   map[string]func() float64 // read when written
	help     map[string]string
	kinds    map[string]string
}

type counterFamily struct {
	labels []string
	values map[string]float64 // by the label values joined with \x00
}

type histogram struct {
	bounds []float64
	counts []uint64 // per bucket (not cumulative); the last is +Inf
	sum    float64
	n      uint64
}

func newMetrics() *metrics {
	return &metrics{counters: map[string]*counterFamily{}, hists: map[string]*histogram{},
		gauges: map[string]func() float64{}, help: map[string]string{}, kinds: map[string]string{}}
}

func (m *metrics) register(name, kind, help string) {
	if _, dup := m.kinds[name]; dup {
		panic("server: metric registered twice: " + name)
	}
	m.order = append(m.order, name)
	m.kinds[name], m.help[name] = kind, help
}

// counter registers a counter family with the given label names.
func (m *metrics) counter(name, help string, labels ...string) {
	m.register(name, "counter", help)
	m.counters[name] = &counterFamily{labels: labels, values: map[string]float64{}}
}

// gauge registers a gauge read from f when the metrics are written.
func (m *metrics) gauge(name, help string, f func() float64) {
	m.register(name, "gauge", help)
	m.gauges[name] = f
}

// histogram registers a histogram with the given upper bounds (increasing; +Inf is added).
func (m *metrics) histogram(name, help string, bounds ...float64) {
	m.register(name, "histogram", help)
	m.hists[name] = &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// add adds v to the counter name with the label values (in the order registered).
func (m *metrics) add(name string, v float64, labelValues ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counters[name]
	if c == nil || len(labelValues) != len(c.labels) {
		panic(fmt.Sprintf("server: counter %s with labels %q", name, labelValues))
	}
	c.values[strings.Join(labelValues, "\x00")] += v
}

// observe adds an observation to the histogram name.
func (m *metrics) observe(name string, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.hists[name]
	i := sort.SearchFloat64s(h.bounds, v) // the first bound ≥ v: le is inclusive
	h.counts[i]++
	h.sum += v
	h.n++
}

// write writes every family in the text format.
func (m *metrics) write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, name := range m.order {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(m.help[name]), name, m.kinds[name])
		switch m.kinds[name] {
		case "counter":
			c := m.counters[name]
			keys := make([]string, 0, len(c.values))
			for k := range c.values {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) == 0 && len(c.labels) == 0 {
				fmt.Fprintf(&b, "%s 0\n", name)
			}
			for _, k := range keys {
				fmt.Fprintf(&b, "%s%s %s\n", name, labelSet(c.labels, strings.Split(k, "\x00")), formatValue(c.values[k]))
			}
		case "gauge":
			fmt.Fprintf(&b, "%s %s\n", name, formatValue(m.gauges[name]()))
		case "histogram":
			h := m.hists[name]
			cum := uint64(0)
			for i, ub := range h.bounds {
				cum += h.counts[i]
				fmt.Fprintf(&b, "%s_bucket{le=\"%s\"} %d\n", name, formatValue(ub), cum)
			}
			cum += h.counts[len(h.bounds)]
			fmt.Fprintf(&b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", name, cum, name, formatValue(h.sum), name, h.n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func labelSet(names, values []string) string {
	if len(names) == 0 {
		return ""
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=\"" + escapeLabel(values[i]) + "\""
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// formatValue writes a float as the format wants it: Go's shortest representation, +Inf, -Inf
// and NaN spelled so.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// escapeLabel escapes a label value: backslash, double quote and line feed.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes a help text: backslash and line feed.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
