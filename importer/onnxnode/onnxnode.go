// Package onnxnode runs ONNX's backend node tests (../shared/oracles/onnx-node: ONNX's own
// operator conformance tests, written by no one here) against vkc: it reads the manifest, imports
// each test's model, reads its inputs and expected outputs, and compares results the way ONNX's
// runner does. The interpreter's test (importer) and the compiled plans' test (the root package)
// share it.
package onnxnode

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/ir/onnx"
)

// RTol and ATol are the tolerances of ONNX's runner for every node test (loader/__init__.py and
// case/node/__init__.py at the oracle's commit): |actual − expected| ≤ ATol + RTol·|expected|.
const (
	RTol = 1e-3
	ATol = 1e-7
)

// Entry is one manifest entry.
type Entry struct {
	Test        string             `json:"test"`
	Op          string             `json:"op"`
	Opset       int                `json:"opset"`
	Ops         []string           `json:"ops"`
	Inputs      []Port             `json:"inputs"`
	Outputs     []Port             `json:"outputs"`
	Dynamic     bool               `json:"dynamic"`
	ConstInputs map[string][]int64 `json:"const_inputs"`
	Flags       []string           `json:"flags"`
	Notes       string             `json:"notes"`
}

// Port is a manifest input or output.
type Port struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// Has reports whether the entry has a flag.
func (e *Entry) Has(flag string) bool {
	for _, f := range e.Flags {
		if f == flag {
			return true
		}
	}
	return false
}

// Manifest reads dir/manifest.json.
func Manifest(dir string) ([]*Entry, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, err
	}
	var es []*Entry
	if err := json.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	return es, nil
}

// Case is one test ready to run: the imported model, its inputs as vkc tensors, and the
// expected outputs as ONNX tensors.
type Case struct {
	Entry    *Entry
	Import   *importer.ONNX
	Inputs   map[string]*ir.Tensor // by the function's input names
	Expected []*onnx.Tensor        // in graph output order, data in RawData
}

// Load imports the test's model (its const_inputs fixed as constants, read from their data
// files) and reads its data set. An import error is returned as is: the caller decides whether
// the test is one vkc cannot express.
func Load(dir string, e *Entry) (*Case, error) {
	td := filepath.Join(dir, e.Test)
	data := filepath.Join(td, "test_data_set_0")
	consts := map[string]*onnx.Tensor{}
	ins := map[string]*onnx.Tensor{}
	for i, p := range e.Inputs {
		t, err := onnx.ReadTensor(filepath.Join(data, "input_"+strconv.Itoa(i)+".pb"))
		if err != nil {
			return nil, err
		}
		if t.Name != "" && t.Name != p.Name {
			return nil, fmt.Errorf("input_%d.pb is %q, the manifest says %q", i, t.Name, p.Name)
		}
		if _, ok := e.ConstInputs[p.Name]; ok {
			consts[p.Name] = t
		} else {
			ins[p.Name] = t
		}
	}
	im, err := importer.ImportONNX(filepath.Join(td, "model.onnx"), importer.ONNXOptions{ConstInputs: consts, Name: e.Test})
	if err != nil {
		return nil, err
	}
	c := &Case{Entry: e, Import: im, Inputs: map[string]*ir.Tensor{}}
	for _, p := range im.Inputs {
		t := ins[p.ONNXName]
		if t == nil {
			return nil, fmt.Errorf("no data for input %q", p.ONNXName)
		}
		x, err := importer.TensorFromONNX("input "+p.ONNXName, t.DataType, t.Dims, t.RawData)
		if err != nil {
			return nil, err
		}
		c.Inputs[p.Name] = x
	}
	for i := range e.Outputs {
		t, err := onnx.ReadTensor(filepath.Join(data, "output_"+strconv.Itoa(i)+".pb"))
		if err != nil {
			return nil, err
		}
		c.Expected = append(c.Expected, t)
	}
	return c, nil
}

// Check compares the function's results (by its output names) with the expected outputs as
// ONNX's runner does: as many outputs, each of exactly the expected dtype and shape, and every
// element within ATol + RTol·|expected| (NaN matches NaN, an infinity only itself). Results are
// converted back to their ONNX types first (importer.TensorToONNX).
func (c *Case) Check(got map[string]*ir.Tensor) error {
	outs := c.Import.Outputs
	if len(outs) != len(c.Expected) {
		return fmt.Errorf("%d outputs, expected %d", len(outs), len(c.Expected))
	}
	for i, p := range outs {
		want := c.Expected[i]
		g := got[p.Name]
		if g == nil {
			return fmt.Errorf("output %s: missing", p.Name)
		}
		if p.DType != want.DataType {
			return fmt.Errorf("output %s: dtype %s, expected %s", p.Name, p.DType, want.DataType)
		}
		if len(want.Dims) != g.Type.Shape.Rank() {
			return fmt.Errorf("output %s: shape %s, expected %v", p.Name, g.Type.Shape, want.Dims)
		}
		for k, d := range want.Dims {
			if int64(g.Type.Shape[k]) != d {
				return fmt.Errorf("output %s: shape %s, expected %v", p.Name, g.Type.Shape, want.Dims)
			}
		}
		raw, err := importer.TensorToONNX(g, p.DType)
		if err != nil {
			return fmt.Errorf("output %s: %w", p.Name, err)
		}
		gv, err := importer.ONNXValues(p.DType, raw)
		if err != nil {
			return err
		}
		wv, err := importer.ONNXValues(want.DataType, want.RawData)
		if err != nil {
			return err
		}
		bad, worst := 0, -1
		for k := range wv {
			if !close(gv[k], wv[k]) {
				if bad == 0 {
					worst = k
				}
				bad++
			}
		}
		if bad > 0 {
			return fmt.Errorf("output %s: %d of %d elements differ beyond atol %g + rtol %g·|expected|; the first, element %d: %g, expected %g",
				p.Name, bad, len(wv), ATol, RTol, worst, gv[worst], wv[worst])
		}
	}
	return nil
}

func close(got, want float64) bool {
	switch {
	case math.IsNaN(want) || math.IsNaN(got):
		return math.IsNaN(want) && math.IsNaN(got)
	case math.IsInf(want, 0) || math.IsInf(got, 0):
		return got == want
	}
	return math.Abs(got-want) <= ATol+RTol*math.Abs(want)
}

// Why says why vkc cannot run a test by its manifest flags, or "" when it should: the
// categories that vkc's static, 2-D, inference-only design excludes. A test in such a category
// still counts as passed when it passes.
func Why(e *Entry) string {
	switch {
	case e.Has("zero-size"):
		return "zero-size: vkc has no empty tensors"
	case e.Has("spatial-3d"):
		return "spatial-3d: vkc has 1-D and 2-D convolution and pooling"
	case e.Has("training-mode"):
		return "training-mode: batch normalisation is imported in inference form"
	}
	return ""
}

// Category names the dtype category of a test for the report: "float" for f32/f16/bf16 data,
// else the first dtype flag ("int64", "bool", …).
func Category(e *Entry) string {
	var ds []string
	for _, f := range e.Flags {
		if d, ok := strings.CutPrefix(f, "dtype:"); ok {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return "float32/16, int32, uint32"
	}
	sort.Strings(ds)
	return strings.Join(ds, "+")
}

// Tally counts outcomes by category.
type Tally struct {
	Passed, Failed, Unsupported map[string]int
	Reasons                     map[string]int // unsupported, by reason
}

// NewTally starts a tally.
func NewTally() *Tally {
	return &Tally{Passed: map[string]int{}, Failed: map[string]int{}, Unsupported: map[string]int{}, Reasons: map[string]int{}}
}

// Totals sums the outcomes.
func (t *Tally) Totals() (passed, failed, unsupported int) {
	for _, v := range t.Passed {
		passed += v
	}
	for _, v := range t.Failed {
		failed += v
	}
	for _, v := range t.Unsupported {
		unsupported += v
	}
	return
}

// String is a table: one line per category, then the reasons of the unsupported tests.
func (t *Tally) String() string {
	cats := map[string]bool{}
	for _, m := range []map[string]int{t.Passed, t.Failed, t.Unsupported} {
		for k := range m {
			cats[k] = true
		}
	}
	var names []string
	for k := range cats {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	p, f, u := t.Totals()
	fmt.Fprintf(&b, "%d passed, %d failed, %d unsupported\n", p, f, u)
	for _, k := range names {
		fmt.Fprintf(&b, "  %-26s passed %3d  failed %3d  unsupported %3d\n", k, t.Passed[k], t.Failed[k], t.Unsupported[k])
	}
	var rs []string
	for r := range t.Reasons {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	for _, r := range rs {
		fmt.Fprintf(&b, "  unsupported %3d: %s\n", t.Reasons[r], r)
	}
	return b.String()
}
