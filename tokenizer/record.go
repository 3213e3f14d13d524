package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vkc-project/vkc/ir/gguf"
	"github.com/vkc-project/vkc/plan"
)

// Record returns what a plan records of the tokenizer at path (anything Load reads): the bytes
// inline, or, with ref, a reference to the file with its size and SHA-256, which FromPlan checks.
// A tokenizer.json is recorded as stored (gzipped or not), with the tokenizer_config.json beside
// it inline; a GGUF file's vocabulary inline is a small GGUF file holding only its tokenizer.*
// metadata, not the weights. The tokenizer is built once here, so a plan never records one that
// does not load, and its BOS, EOS, other end-of-generation ids (Tokenizer.EOG: those of the
// config.json and generation_config.json beside a tokenizer.json are recorded here, as the plan
// holds neither file) and chat template are filled in.
func Record(path string, ref bool) (*plan.Tokenizer, error) {
	t, err := Load(path)
	if err != nil {
		return nil, err
	}
	file, err := tokenizerFile(path)
	if err != nil {
		return nil, err
	}
	rec := &plan.Tokenizer{Format: plan.TokenizerJSON, BOS: t.bos, EOS: t.eos, ChatTemplate: t.chatTemplate, EOG: slices.Clone(t.eog)}
	if isGGUF(file) {
		rec.Format = plan.TokenizerGGUF
	} else if cfg, err := os.ReadFile(filepath.Join(filepath.Dir(file), "tokenizer_config.json")); err == nil {
		rec.Config = cfg
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	if ref {
		abs, err := filepath.Abs(file)
		if err != nil {
			return nil, err
		}
		src, err := hashFile(abs)
		if err != nil {
			return nil, err
		}
		rec.Ref = src
		return rec, nil
	}
	if rec.Format == plan.TokenizerGGUF {
		f, err := gguf.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if rec.Data, err = VocabGGUF(f); err != nil {
			return nil, err
		}
		return rec, nil
	}
	if rec.Data, err = os.ReadFile(file); err != nil {
		return nil, err
	}
	return rec, nil
}

// tokenizerFile is the file Load reads for path: path itself, or the tokenizer.json(.gz) in a
// directory.
func tokenizerFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return path, nil
	}
	for _, name := range []string{"tokenizer.json", "tokenizer.json.gz"} {
		if _, err := os.Stat(filepath.Join(path, name)); err == nil {
			return filepath.Join(path, name), nil
		}
	}
	return "", fmt.Errorf("%s: no tokenizer.json or tokenizer.json.gz in the directory", path)
}

func hashFile(path string) (*plan.Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	src := &plan.Source{Path: path, Size: uint64(n)}
	copy(src.SHA256[:], h.Sum(nil))
	return src, nil
}

// VocabGGUF returns a GGUF file holding only f's tokenizer.* metadata: the vocabulary of a model
// file, small enough for a plan to embed.
func VocabGGUF(f *gguf.File) ([]byte, error) {
	var b gguf.Builder
	n := 0
	for _, kv := range f.Metadata {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			b.Add(kv.Key, kv.Value)
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no vocabulary (no tokenizer.* metadata)", f.Path)
	}
	return b.Bytes()
}

// FromBytes builds a tokenizer from the bytes a plan records: format plan.TokenizerJSON (a
// tokenizer.json, gzipped or not, and its tokenizer_config.json or nil) or plan.TokenizerGGUF
// (a GGUF file with tokenizer.* metadata; config must be nil).
func FromBytes(format string, data, config []byte) (*Tokenizer, error) {
	switch format {
	case plan.TokenizerJSON:
		if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
			var err error
			if data, err = gunzip(data); err != nil {
				return nil, fmt.Errorf("tokenizer.json: %w", err)
			}
		}
		return Parse(data, config)
	case plan.TokenizerGGUF:
		if config != nil {
			return nil, fmt.Errorf("a GGUF vocabulary takes no tokenizer_config.json")
		}
		f, err := gguf.FromBytes("vocabulary", data)
		if err != nil {
			return nil, err
		}
		return FromGGUF(f)
	}
	return nil, fmt.Errorf("tokenizer format %q is not one this vkc reads (%q or %q)", format, plan.TokenizerJSON, plan.TokenizerGGUF)
}

// FromPlan builds the tokenizer a plan records. A referenced file is resolved against the
// directory of planPath when relative, and must have the recorded size and SHA-256. The record's
// BOS, EOS, end-of-generation ids and chat template are the tokenizer's.
func FromPlan(rec *plan.Tokenizer, planPath string) (*Tokenizer, error) {
	if rec == nil {
		return nil, fmt.Errorf("%s: the plan records no tokenizer", planPath)
	}
	var t *Tokenizer
	var err error
	if rec.Ref != nil {
		t, err = fromRef(rec, planPath)
	} else {
		t, err = FromBytes(rec.Format, rec.Data, rec.Config)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: the plan's tokenizer: %w", planPath, err)
	}
	t.bos, t.eos, t.chatTemplate = rec.BOS, rec.EOS, rec.ChatTemplate
	t.eog = nil
	t.addEOG(rec.EOG)
	t.chatSource = planPath + " (its recorded chat template)"
	return t, nil
}

// fromRef reads the file a record refers to, after checking its size and SHA-256.
func fromRef(rec *plan.Tokenizer, planPath string) (*Tokenizer, error) {
	path := rec.Ref.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(planPath), path)
	}
	src, err := hashFile(path) // streamed: a referenced GGUF file may be gigabytes
	if err != nil {
		return nil, err
	}
	if src.Size != rec.Ref.Size || !bytes.Equal(src.SHA256[:], rec.Ref.SHA256[:]) {
		return nil, fmt.Errorf("%s has changed since the plan was compiled (%d bytes, sha256 %x; the plan recorded %d bytes, sha256 %x)",
			path, src.Size, src.SHA256, rec.Ref.Size, rec.Ref.SHA256)
	}
	if rec.Format == plan.TokenizerGGUF {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return FromGGUF(f)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return FromBytes(rec.Format, data, rec.Config)
}
