package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/vkc-project/vkc/ir/gguf"
)

// unigramDir is testdata/tokenizers/unigram: two SentencePiece unigram models trained for this
// test and written as tokenizer.json files the way transformers writes T5's and ALBERT's, with
// the ids the Hugging Face tokenizers library (its npm build of the Rust code) gives for 93
// texts (its README says how they were made).
const unigramDir = "../testdata/tokenizers/unigram"

type unigramGolden struct {
	Reference string `json:"reference"`
	Cases     []struct {
		Text           string  `json:"text"`
		IDs            []int32 `json:"ids"`
		IDsWithSpecial []int32 `json:"ids_with_special"`
		Decoded        string  `json:"decoded"`
	} `json:"cases"`
}

func loadUnigramGolden(t *testing.T, name string) (*Tokenizer, *unigramGolden) {
	t.Helper()
	tok, err := Load(filepath.Join(unigramDir, name))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(unigramDir, name, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g unigramGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return tok, &g
}

// TestUnigramOracle: the ids with and without special tokens, and the decoded text, of the T5-
// and ALBERT-style Unigram tokenizers (Precompiled normalizer, Metaspace, Viterbi with ties,
// unknown characters, byte fallback) as the Rust library gives them.
func TestUnigramOracle(t *testing.T) {
	for _, name := range []string{"t5", "albert"} {
		tok, g := loadUnigramGolden(t, name)
		pass := 0
		for i, c := range g.Cases {
			ok := true
			ids, err := tok.Encode(c.Text, false)
			if err != nil || !equalIDs(ids, c.IDs) {
				t.Errorf("%s case %d %q: ids %v (%v), want %v", name, i, c.Text, ids, err, c.IDs)
				ok = false
			}
			ids, err = tok.Encode(c.Text, true)
			if err != nil || !equalIDs(ids, c.IDsWithSpecial) {
				t.Errorf("%s case %d %q: ids with special tokens %v (%v), want %v", name, i, c.Text, ids, err, c.IDsWithSpecial)
				ok = false
			}
			s, err := tok.Decode(c.IDs, DecodeOptions{})
			if err != nil || s != c.Decoded {
				t.Errorf("%s case %d %q: decoded %q (%v), want %q", name, i, c.Text, s, err, c.Decoded)
				ok = false
			}
			if ok {
				pass++
			}
		}
		t.Logf("%s: %d of %d cases as %s", name, pass, len(g.Cases), g.Reference)
	}
}

// TestUnigramViterbi checks the model on vocabularies small enough to work the answers out by
// hand from the algorithm's definition (the Rust library's encode_optimized).
func TestUnigramViterbi(t *testing.T) {
	// ids:      0        1     2     3     4      5       6     7
	pieces := []string{"<unk>", "a", "b", "ab", "xa", "<0x78>", "c", "abc"}
	scores := []float64{0, -1, -2, -2.5, -12.5, -3, -4, -7}
	m, err := newUnigram(pieces, scores, 0, false, "model")
	if err != nil {
		t.Fatal(err)
	}
	mb, err := newUnigram(pieces, scores, 0, true, "model")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m    *unigramModel
		text string
		want []int32
	}{
		// "ab" (-2.5) beats "a"+"b" (-3).
		{m, "ab", []int32{3}},
		// "abc": "abc" (-7) ties "ab"+"c" (-6.5)? No: -6.5 > -7, so ab+c.
		{m, "abc", []int32{3, 6}},
		// min_score is -12.5, so an unknown character scores -22.5: "xa" (-12.5) beats
		// unk(x)+a (-23.5).
		{m, "xa", []int32{4}},
		// "y" has no piece: the unknown token; "yy" is one fused unknown.
		{m, "y", []int32{0}},
		{m, "yyb", []int32{0, 2}},
		{m, "ayyb", []int32{1, 0, 2}},
		// With byte fallback the fused unknown "yy" would be <0x79><0x79>, which the
		// vocabulary lacks, so it stays the unknown token; "x" alone is an unknown (no single
		// piece) that byte fallback writes as <0x78> (id 5).
		{mb, "yy", []int32{0}},
		{mb, "xb", []int32{5, 2}},
		{m, "", nil},
	} {
		got, err := c.m.tokenize(nil, c.text, nil)
		if err != nil || !equalIDs(got, c.want) {
			t.Errorf("%q (byte fallback %v): %v (%v), want %v", c.text, c.m.byteFallback, got, err, c.want)
		}
	}
	// A tie: "a"+"bc" and "ab"+"c" both score -3. Candidates into the end come in order of
	// their start: "bc" from start 1 (after "a", -1) first, then "c" from start 2 (after "ab",
	// -1.5); an equal score does not replace, so "a"+"bc" stays (the earliest start wins).
	tie, err := newUnigram([]string{"<unk>", "a", "b", "c", "ab", "bc"}, []float64{0, -1, -5, -1.5, -1.5, -2}, 0, false, "model")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tie.tokenize(nil, "abc", nil); err != nil || !equalIDs(got, []int32{1, 5}) {
		t.Errorf("tie: %v (%v), want [1 5]", got, err)
	}
	// Without an unknown token, a character no piece covers is an error naming it.
	nounk, err := newUnigram([]string{"a"}, []float64{-1}, -1, false, "model")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nounk.tokenize(nil, "ab", nil); err == nil {
		t.Error("no unknown token: no error")
	}
}

// TestPrecompiledErrors: a charsmap blob that cannot be a trie is an error naming the place.
func TestPrecompiledErrors(t *testing.T) {
	for _, blob := range [][]byte{nil, {1, 0}, {8, 0, 0, 0, 1, 2}, {3, 0, 0, 0, 1, 2, 3, 4}, {0, 0, 0, 0}} {
		if _, err := parsePrecompiled(blob); err == nil {
			t.Errorf("%v: no error", blob)
		}
	}
	if _, err := Parse([]byte(`{"normalizer": {"type": "Precompiled", "precompiled_charsmap": "!!"}, "model": {"type": "Unigram", "vocab": [["a", -1]]}}`), nil); err == nil {
		t.Error("bad base64 accepted")
	}
	for _, m := range []string{
		`{"type": "Unigram", "vocab": {"a": 0}}`,
		`{"type": "Unigram", "vocab": [["a", "x"]]}`,
		`{"type": "Unigram", "vocab": [["a", -1]], "unk_id": 3}`,
		`{"type": "Unigram", "vocab": []}`,
	} {
		if _, err := Parse([]byte(`{"model": `+m+`}`), nil); err == nil {
			t.Errorf("%s accepted", m)
		}
	}
}

// TestUnigramGGUF: a GGUF t5 vocabulary (llama.cpp's keys, written here from the T5-style
// tokenizer.json: its pieces, scores as f32, token types and precompiled charsmap) builds the
// pipeline transformers' converter writes for T5, so it gives the Rust library's ids of the
// tokenizer.json for every text, and survives recording in a plan (VocabGGUF).
func TestUnigramGGUF(t *testing.T) {
	_, g := loadUnigramGolden(t, "t5")
	data, err := readMaybeGzip(filepath.Join(unigramDir, "t5", "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Normalizer struct {
			Charsmap string `json:"precompiled_charsmap"`
		} `json:"normalizer"`
		Model struct {
			UnkID int                  `json:"unk_id"`
			Vocab [][2]json.RawMessage `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	v := &Vocab{Model: "t5", BOS: -1, EOS: 1, UNK: int32(f.Model.UnkID)}
	for i, e := range f.Model.Vocab {
		var piece string
		var score float64
		if json.Unmarshal(e[0], &piece) != nil || json.Unmarshal(e[1], &score) != nil {
			t.Fatalf("vocab[%d]", i)
		}
		if float64(float32(score)) != score {
			t.Fatalf("vocab[%d]: score %v is not an f32 (SentencePiece stores f32)", i, score)
		}
		ty := TypeNormal
		switch {
		case i == f.Model.UnkID:
			ty = TypeUnknown
		case piece == "<pad>" || piece == "</s>":
			ty = TypeControl
		}
		v.Tokens, v.Scores, v.Types = append(v.Tokens, piece), append(v.Scores, float32(score)), append(v.Types, ty)
	}
	if v.PrecompiledCharsmap, err = base64.StdEncoding.DecodeString(f.Normalizer.Charsmap); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "t5.gguf")
	writeVocabGGUF(t, path, v)
	var b gguf.Builder
	ff, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range ff.Metadata {
		b.Add(kv.Key, kv.Value)
	}
	ff.Close()
	b.Add("tokenizer.ggml.precompiled_charsmap", gguf.MustValue(v.PrecompiledCharsmap))
	raw, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Record(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fromPlan, err := FromPlan(rec, "x.plan")
	if err != nil {
		t.Fatal(err)
	}
	pass := 0
	for i, c := range g.Cases {
		ok := true
		for _, tk := range []*Tokenizer{tok, fromPlan} {
			ids, err := tk.Encode(c.Text, false)
			if err != nil || !equalIDs(ids, c.IDs) {
				t.Errorf("case %d %q: ids %v (%v), want %v", i, c.Text, ids, err, c.IDs)
				ok = false
			}
			ids, err = tk.Encode(c.Text, true)
			if err != nil || !equalIDs(ids, c.IDsWithSpecial) {
				t.Errorf("case %d %q: ids with special tokens %v (%v), want %v", i, c.Text, ids, err, c.IDsWithSpecial)
				ok = false
			}
			if s, err := tk.Decode(c.IDs, DecodeOptions{}); err != nil || s != c.Decoded {
				t.Errorf("case %d %q: decoded %q (%v), want %q", i, c.Text, s, err, c.Decoded)
				ok = false
			}
		}
		if ok {
			pass++
		}
	}
	t.Logf("GGUF t5: %d of %d cases as the tokenizer.json", pass, len(g.Cases))
}

// FuzzUnigram: any valid UTF-8 text encodes with both Unigram tokenizers (every character is
// covered: a piece, the unknown token or byte tokens) into ids that decode.
func FuzzUnigram(f *testing.F) {
	for _, s := range []string{"Hello world", "ｶﾞｷﾞ", "e\u0301\u0301\u0301", "</s><unk>", "  x  ", "👨‍👩‍👧‍👦", "\x00\u0085"} {
		f.Add(s)
	}
	var tks []*Tokenizer
	for _, name := range []string{"t5", "albert"} {
		tk, err := Load(filepath.Join(unigramDir, name))
		if err != nil {
			f.Fatal(err)
		}
		tks = append(tks, tk)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for i, tk := range tks {
			ids, err := tk.Encode(s, true)
			if err != nil {
				t.Fatalf("tokenizer %d: %q: %v", i, s, err)
			}
			if _, err := tk.Decode(ids, DecodeOptions{}); err != nil {
				t.Fatalf("tokenizer %d: %q: decode %v: %v", i, s, ids, err)
			}
		}
	})
}
