package vkc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vkc-project/vkc/importer"
	"github.com/vkc-project/vkc/internal/safefile"
	"github.com/vkc-project/vkc/ir"
	"github.com/vkc-project/vkc/plan"
	"github.com/vkc-project/vkc/runtime"
	"gopkg.in/yaml.v3"
)

// The plan cache: what lets `vkc run MODEL` (a model.yaml, a GGUF or ONNX file, a Hugging Face
// folder) compile a model once and run the plan the next time at once.
//
// A cached plan is found by a key: the compiler's version, the device's fingerprint (vendor,
// device, driver version, pipeline-cache UUID), the compile options that change the plan, and
// the model's files as the file system describes them (path, size, modification time, inode),
// not their contents: hashing gigabytes of weights on every run would cost what the cache saves.
// A file changed in place within one tick of its modification time with the same size is the
// case this misses (PlanCacheOptions.Recompile forces a compile). Plans hold their weights
// (inline), so a cached plan does not depend on the model's files staying where they are, and
// the cache keeps only the most recently used few.

// DefaultPlanCacheKeep is how many plans the plan cache keeps (the most recently used).
const DefaultPlanCacheKeep = 4

// PlanCacheOptions configure CachedPlan.
type PlanCacheOptions struct {
	// Compile are the options a compile uses (Device, Tune, Budget, Tokenizer, Progress …);
	// Weights is always inline.
	Compile Options
	// Dims fixes symbolic input dimensions of an ONNX model (importer.Options.Dims).
	Dims map[string]int
	// Slots imports a GGUF file or Hugging Face folder with KV caches for that many sequences
	// and a batched step (importer.Options.Slots: vkc serve --parallel); 0 for none.
	Slots int
	// Precision is a GGUF file's or Hugging Face folder's import precision (importer.Options.
	// Precision: vkc serve --act, --kv); the zero value is the importer's defaults.
	Precision importer.Precision
	// Dir is the cache folder; "" is os.UserCacheDir()/vkc/plans.
	Dir string
	// Keep is how many plans the folder keeps (0: DefaultPlanCacheKeep).
	Keep int
	// Recompile compiles even when a cached plan matches (and replaces it).
	Recompile bool
	// Compiling, when set, is called before a compile starts, with the plan's path.
	Compiling func(planPath string)
}

// CachedPlanResult says where the plan is and how it was obtained.
type CachedPlanResult struct {
	Path   string
	Cached bool    // found in the cache (no compile)
	Report *Report // the compile's report (nil when Cached)
}

// CachedPlan returns a plan of the model at path (model.yaml, .gguf, .onnx or a Hugging Face
// folder) for the device: the cached one when the model's files, the options, the device and
// the compiler are those it was compiled with, else a fresh compile written into the cache
// (atomically: concurrent runs each write a whole plan).
func CachedPlan(ctx context.Context, path string, o PlanCacheOptions) (*CachedPlanResult, error) {
	dir := o.Dir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("plan cache: %w (set the cache folder)", err)
		}
		dir = filepath.Join(base, "vkc", "plans")
	}
	key, err := planCacheKey(path, o)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(dir, key+".plan")
	if !o.Recompile {
		if p, err := plan.ReadFile(out); err == nil && p.Validate() == nil {
			now := time.Now()
			_ = os.Chtimes(out, now, now) // most recently used
			return &CachedPlanResult{Path: out, Cached: true}, nil
		}
	}
	if o.Compiling != nil {
		o.Compiling(out)
	}
	m, err := importer.LoadWith(path, importer.Options{Dims: o.Dims, Slots: o.Slots, Precision: o.Precision})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	co := o.Compile
	co.Weights = WeightsInline
	co.TokenizerRef = false
	p, rep, err := Compile(ctx, m, co)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w; nothing written", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plan cache: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	fo := p.FileOptions(plan.WriteOptions{Inputs: []string{path}})
	if err := safefile.Write(ctx, out, fo, p.Encode); err != nil {
		return nil, fmt.Errorf("plan cache: %w", err)
	}
	evictPlans(dir, out, o.Keep)
	return &CachedPlanResult{Path: out, Report: rep}, nil
}

// planCacheKey hashes what the plan depends on (see the file comment).
func planCacheKey(path string, o PlanCacheOptions) (string, error) {
	h := sha256.New()
	w := func(format string, args ...any) { fmt.Fprintf(h, format+"\n", args...) }
	w("vkc plan cache 1, compiler %s", Version)
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	w("model %s", abs)
	files, err := modelFiles(abs)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		w("file %s %d %d %s", f, st.Size(), st.ModTime().UnixNano(), inode(st))
	}
	c := o.Compile
	if c.Target == nil {
		devs, chosen, err := runtime.Devices(runtime.Options{Device: c.Device})
		if err != nil {
			return "", fmt.Errorf("find device: %w", err)
		}
		for i := range devs {
			if devs[i].Index == chosen {
				w("device %s %s", devs[i].Fingerprint, devs[i].Name)
			}
		}
	} else {
		w("target %+v", *c.Target)
	}
	w("functions %q tune %v budget %v candidates %d noopt %v variants %v novariants %v length %d int8 %v argmax %v topk %d tokenizer %q",
		c.Functions, c.Tune, c.Budget, c.Candidates, c.NoOptimize, c.LengthVariants, c.NoLengthVariants, c.Length, c.Int8, c.ArgmaxOutput, c.TopK, c.Tokenizer)
	dims := make([]string, 0, len(o.Dims))
	for k, v := range o.Dims {
		dims = append(dims, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(dims)
	w("dims %s", strings.Join(dims, ","))
	if o.Slots > 0 {
		w("slots %d", o.Slots)
	}
	if o.Precision != (importer.Precision{}) { // (the defaults' keys stay those of older plans)
		w("precision act %q kv %q", o.Precision.Act, o.Precision.KV)
	}
	if c.Tokenizer != "" && c.Tokenizer != NoTokenizer {
		if st, err := os.Stat(c.Tokenizer); err == nil {
			w("tokenizer file %d %d", st.Size(), st.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// modelFiles lists the files a model at abs reads: a folder's files (a Hugging Face checkpoint:
// config, shards, tokenizer), an ONNX file and its folder's files (external data), a GGUF file, or
// a model.yaml and the weight files it names.
func modelFiles(abs string) ([]string, error) {
	st, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	folder := func(dir string) ([]string, error) {
		es, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, e := range es {
			p := filepath.Join(dir, e.Name())
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				out = append(out, p)
			}
		}
		return out, nil
	}
	if st.IsDir() {
		return folder(abs)
	}
	switch strings.ToLower(filepath.Ext(abs)) {
	case ".onnx":
		return folder(filepath.Dir(abs))
	case ".yaml", ".yml":
		files := []string{abs}
		if m, err := ir.ParseModelWith(abs, ir.ParseOptions{SkipWeights: true}); err == nil {
			if f, err := ModelWeightsFile(m); err == nil {
				files = append(files, f)
			} else if more, err := weightFilesOf(abs); err == nil {
				files = append(files, more...)
			}
			if m.Tokenizer != "" {
				t := m.Tokenizer
				if !filepath.IsAbs(t) {
					t = filepath.Join(filepath.Dir(abs), t)
				}
				files = append(files, t)
			}
		}
		return files, nil
	}
	return []string{abs}, nil
}

// weightFilesOf returns the files a model.yaml's weights: {files: [...]} names (a sharded
// checkpoint, which ModelWeightsFile refuses).
func weightFilesOf(model string) ([]string, error) {
	src, err := os.ReadFile(model)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Weights struct {
			Files []string `yaml:"files"`
		} `yaml:"weights"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	var out []string
	for _, f := range doc.Weights.Files {
		if !filepath.IsAbs(f) {
			f = filepath.Join(filepath.Dir(model), f)
		}
		out = append(out, f)
	}
	return out, nil
}

// evictPlans removes the least recently used plans of dir beyond keep (never keepPath).
func evictPlans(dir, keepPath string, keep int) {
	if keep <= 0 {
		keep = DefaultPlanCacheKeep
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type entry struct {
		path string
		t    time.Time
	}
	var plans []entry
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".plan") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			plans = append(plans, entry{filepath.Join(dir, e.Name()), info.ModTime()})
		}
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].t.After(plans[j].t) })
	for i, p := range plans {
		if i >= keep && p.path != keepPath {
			os.Remove(p.path)
		}
	}
}

// IsPlanFile reports whether the file at path starts with a plan's magic number.
func IsPlanFile(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	return plan.CheckFile(path) == nil
}
