package tokenizer

import (
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// smallByteLevel is a GPT-2-style tokenizer (ByteLevel pre-tokenizer with its regex, a few
// merges, ByteLevel decoder) that needs no oracle file.
func smallByteLevel(t testing.TB) *Tokenizer {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[byteToStr[b]] = b
	}
	for i, tok := range []string{"Ġt", "he", "Ġthe", "in", "ing", "ĠĠ"} {
		vocab[tok] = 256 + i
	}
	js := `{"model":{"type":"BPE","vocab":` + string(mustJSON(vocab)) + `,"merges":["Ġ t","h e","Ġt he","i n","in g","Ġ Ġ"]},
		"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},
		"decoder":{"type":"ByteLevel"},
		"added_tokens":[{"id":300,"content":"<|end|>","special":true,"normalized":false}]}`
	tk, err := Parse([]byte(js), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// FuzzByteLevelRoundTrip: for byte-level BPE, decode(encode(s)) == s for every valid UTF-8 s,
// with and without special tokens in the text. It runs on a small built-in tokenizer and, when
// the oracle is present, on Llama 3's (no normalizer, so nothing may change the text).
func FuzzByteLevelRoundTrip(f *testing.F) {
	for _, s := range []string{"Hello world", "  the thing\r\n\n\tx", "数字123 ｅｍｏｊｉ 👨‍👩‍👧", "\u0085\ufeff \x00", "<|end|>x<|begin_of_text|>", "ĠĊ ▁"} {
		f.Add(s)
	}
	tks := []*Tokenizer{smallByteLevel(f)}
	if dir, ok := oracleDirIfPresent(); ok {
		tk, err := Load(filepath.Join(dir, "llama3"))
		if err != nil {
			f.Fatal(err)
		}
		tks = append(tks, tk)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			if _, err := tks[0].Encode(s, false); err == nil {
				t.Errorf("%q: invalid UTF-8 encoded without an error", s)
			}
			return
		}
		for i, tk := range tks {
			ids, err := tk.Encode(s, true)
			if err != nil {
				t.Fatalf("tokenizer %d: %q: %v", i, s, err)
			}
			got, err := tk.Decode(ids, DecodeOptions{NoCleanup: true})
			if err != nil {
				t.Fatalf("tokenizer %d: %q: decode %v: %v", i, s, ids, err)
			}
			if got != s {
				t.Errorf("tokenizer %d: decode(encode(%q)) = %q (ids %v)", i, s, got, ids)
			}
		}
	})
}

// oracleDirIfPresent is oracleDir without a testing.TB: for setup code that should go on
// without the oracle.
func oracleDirIfPresent() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
	o := filepath.Join(dir, "..", "shared", "oracles", "tokenizers")
	_, err = os.Stat(filepath.Join(o, "corpus.json"))
	return o, err == nil
}
