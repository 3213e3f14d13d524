package plan

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary writes a human-readable description of the plan, as `vkc inspect` prints it: the device,
// memory (weight, state and arena bytes), each function's signature and dispatch list (barriers
// marked with "|"), the kernels with their configurations and use counts, the rules applied, and
// the compiler's candidates and notes. The output is deterministic.
func (p *Plan) Summary(w io.Writer) error {
	ew := &errWriter{w: w}
	pr := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }

	pr("plan for model %q, compiled by %q (format version %d)\n", p.Model, p.CompilerVersion, FormatVersion)
	pr("device: %v\n", p.Device)
	switch p.Record.ChosenBy {
	case ChosenStatic:
		pr("chosen by: the static path (roofline estimates, default configurations; no measurement)\n")
	case ChosenMeasured:
		pr("chosen by: measurement on the device (kernels tuned, whole functions selected)\n")
	}

	pr("\nmemory:\n")
	wt := &p.Weights
	where := "inline"
	if s := wt.Source; s != nil {
		where = fmt.Sprintf("external: %s, %s, sha256 %x", s.Path, sizeStr(s.Size), s.SHA256)
	}
	pr("  weights  %10s  %d tensors (%s)%s\n", sizeStr(wt.Size), len(wt.Tensors), where, buffersStr(wt.Split, wt.Size))
	// bytes per weight dtype, in dtype order (f32, f16, …, the block formats)
	byDType := map[DType]uint64{}
	var dts []DType
	for _, t := range wt.Tensors {
		if _, ok := byDType[t.DType]; !ok {
			dts = append(dts, t.DType)
		}
		byDType[t.DType] += t.Size
	}
	sort.Slice(dts, func(i, j int) bool { return dts[i] < dts[j] })
	if len(dts) > 0 {
		parts := make([]string, len(dts))
		for i, d := range dts {
			parts[i] = fmt.Sprintf("%s %s", d, sizeStr(byDType[d]))
		}
		pr("           by dtype: %s\n", strings.Join(parts, ", "))
	}
	pr("  state    %10s  %d tensors%s\n", sizeStr(p.StateSize), len(p.State), buffersStr(p.StateSplit, p.StateSize))
	for _, t := range p.State {
		pr("           %-24s %s%v at %d\n", t.Name, t.DType, t.Shape, t.Offset)
	}
	pr("  arena    %10s  aligned to %d%s\n", sizeStr(p.Arena.Size), max(p.Arena.Align, 1), buffersStr(p.Arena.Split, p.Arena.Size))
	dm := p.DeviceMemory()
	pr("  device   %10s  in all with %s of input and output slots, %d allocations, the largest %s\n",
		sizeStr(dm.Total()), sizeStr(dm.Staging), dm.Buffers, sizeStr(dm.Largest))
	if p.Tokenizer != nil {
		pr("\ntokenizer: %v\n", p.Tokenizer)
	} else if hasLogits(p) {
		pr("\ntokenizer: none recorded (text generation needs one given apart: vkc run --tokenizer FILE)\n")
	}

	uses := make([]int, len(p.Modules))
	for _, f := range p.Functions {
		var est, meas time.Duration
		barriers := 0
		for _, d := range f.Dispatches {
			est += d.Estimated
			meas += d.Measured
			if d.BarrierBefore {
				barriers++
			}
			if int(d.Module) < len(uses) {
				uses[d.Module]++
			}
		}
		pr("\nfunction %s: %d dispatches, %d barriers, estimated %v, measured %v\n",
			f.Name, len(f.Dispatches), barriers, durStr(est), durStr(meas))
		if l := f.Length; l != nil {
			scaled := 0
			for _, d := range f.Dispatches {
				if d.Scale != nil {
					scaled++
				}
			}
			pr("  run-time length %s in %d..%d (buffers sized for %d); %d of %d grids follow it\n",
				l.Name, l.Min, l.Max, l.Max, scaled, len(f.Dispatches))
			for _, g := range f.Variants {
				if gl := g.Length; gl != nil {
					b := 0
					for _, d := range g.Dispatches {
						if d.BarrierBefore {
							b++
						}
					}
					pr("  variant for %s in %d..%d (compiled for %d): %d dispatches, %d barriers\n", gl.Name, gl.Min, gl.Max, gl.Max, len(g.Dispatches), b)
				}
			}
		}
		pr("  inputs:  %s\n", valuesStr(f.Inputs))
		pr("  outputs: %s\n", valuesStr(f.Outputs))
		for _, r := range f.Ranges {
			pr("  checked: %s\n", f.DescribeRange(r))
		}
		if fl, b, known := f.MaxWork(); known {
			pr("  work:    %s FLOP, %s moved (at the largest run-time counts)\n", siStr(fl), sizeStr(uint64(b)))
		}
		if len(f.Dispatches) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  #\t\tkernel\tgrid\tops\test\tmeas\n")
		for i, d := range f.Dispatches {
			bar := ""
			if d.BarrierBefore {
				bar = "|"
			}
			key := fmt.Sprintf("module %d", d.Module)
			if int(d.Module) < len(p.Modules) {
				key = p.Modules[d.Module].Key
			}
			ops := strings.Join(d.Ops, "+")
			if d.Label != "" {
				ops += " (" + d.Label + ")"
			}
			grid := fmt.Sprintf("%dx%dx%d", d.Grid[0], d.Grid[1], d.Grid[2])
			if s := d.Scale; s != nil {
				ax := "xyz"[min(s.Axis, 2) : min(s.Axis, 2)+1]
				if s.Axis == LinearAxis {
					ax = "linear"
				}
				grid += fmt.Sprintf(" (%s: n·%d/%d)", ax, s.Num, s.Den)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", i, bar, key, grid,
				ops, durStr(d.Estimated), durStr(d.Measured))
		}
		tw.Flush()
	}

	pr("\nkernels: %d modules\n", len(p.Modules))
	for i, m := range p.Modules {
		pr("  %d %s: entry %s, workgroup %dx%dx%d, %d SPIR-V words, %d bindings, %d push-constant bytes, used %d times\n",
			i, m.Key, m.Entry, m.Workgroup[0], m.Workgroup[1], m.Workgroup[2], len(m.SPIRV), len(m.Bindings), m.PushConstantSize, uses[i])
		if len(m.Config) > 0 {
			pr("      config %s\n", configStr(m.Config))
		}
	}

	r := &p.Record
	var total uint64
	for _, rc := range r.Rules {
		total += rc.Count
	}
	pr("\nrules applied: %d rules, %d applications\n", len(r.Rules), total)
	rules := append([]RuleCount(nil), r.Rules...)
	sort.SliceStable(rules, func(a, b int) bool { return rules[a].Count > rules[b].Count })
	for _, rc := range rules {
		pr("  %6d  %s\n", rc.Count, rc.Name)
	}
	if len(r.Candidates) > 0 {
		chosen := 0
		for _, c := range r.Candidates {
			if c.Chosen {
				chosen++
			}
		}
		pr("\ncandidates: %d considered, %d chosen\n", len(r.Candidates), chosen)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		for _, c := range r.Candidates {
			mark := " "
			if c.Chosen {
				mark = "*"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\test %s\tmeas %s\t%s\n", mark, c.Subject, c.Kernel, configStr(c.Config),
				durStr(c.Estimated), durStr(c.Measured), c.Note)
		}
		tw.Flush()
	}
	if len(r.Notes) > 0 {
		pr("\nnotes:\n")
		for _, n := range r.Notes {
			pr("  %s\n", n)
		}
	}
	return ew.err
}

// errWriter keeps the first write error so Summary can report it once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return len(b), nil
	}
	_, e.err = e.w.Write(b)
	return len(b), nil
}

func valuesStr(vs []Value) string {
	if len(vs) == 0 {
		return "none"
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		place := v.Place.String()
		if v.Place == InArena {
			place = fmt.Sprintf("arena@%d", v.Offset)
		}
		if v.Bounded {
			place += ", rows follow the length"
		}
		parts[i] = fmt.Sprintf("%s %s%v (%s)", v.Name, v.DType, v.Shape, place)
	}
	return strings.Join(parts, ", ")
}

func configStr(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func durStr(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

func sizeStr(n uint64) string {
	const k = 1024
	switch {
	case n >= k*k*k:
		return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
	case n >= k*k:
		return fmt.Sprintf("%.1f MiB", float64(n)/(k*k))
	case n >= k:
		return fmt.Sprintf("%.1f KiB", float64(n)/k)
	}
	return fmt.Sprintf("%d B", n)
}

// siStr writes x with an SI prefix: "1.23 G".
func siStr(x float64) string {
	for _, u := range []struct {
		f float64
		p string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if x >= u.f {
			return fmt.Sprintf("%.3g %s", x/u.f, u.p)
		}
	}
	return fmt.Sprintf("%.3g", x)
}

// hasLogits reports whether a function of p outputs logits (a language model's plan).
func hasLogits(p *Plan) bool {
	for _, f := range p.Functions {
		for _, o := range f.Outputs {
			if o.Name == "logits" {
				return true
			}
		}
	}
	return false
}

// buffersStr says how a split region is cut into device buffers ("" for one buffer).
func buffersStr(s Split, size uint64) string {
	if len(s) == 0 {
		return ""
	}
	parts := make([]string, s.Buffers())
	for i := range parts {
		a, b := s.Bounds(i, size)
		parts[i] = sizeStr(b - a)
	}
	return fmt.Sprintf(", in %d buffers (%s)", s.Buffers(), strings.Join(parts, ", "))
}
