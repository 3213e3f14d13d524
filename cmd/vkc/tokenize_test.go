package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/ir/gguf"
)

// tokenizerOracle returns ../shared/oracles/tokenizers (beside the module root), or skips.
func tokenizerOracle(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(oracles.Dir(t, "tokenizers"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

type tokGolden struct {
	Cases []struct {
		Text               string   `json:"text"`
		IDs                []int32  `json:"ids"`
		IDsWithSpecial     []int32  `json:"ids_with_special"`
		Tokens             []string `json:"tokens"`
		DecodedWithSpecial string   `json:"decoded_with_special"`
		DecodedSkipSpecial string   `json:"decoded_skip_special"`
	} `json:"cases"`
}

func readTokGolden(t *testing.T, dir string) *tokGolden {
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g tokGolden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func idList(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// TestBinaryTokenize runs the built binary on the oracle's Llama 2 and Llama 3 tokenizers and
// compares what it prints with the oracle's ids, tokens and decodes.
func TestBinaryTokenize(t *testing.T) {
	oracle := tokenizerOracle(t)
	dir := t.TempDir()
	l2 := filepath.Join(oracle, "llama2", "tokenizer.json")
	g2 := readTokGolden(t, filepath.Join(oracle, "llama2"))
	c0 := g2.Cases[0] // "Hello world"
	crlf := filepath.Join(dir, "crlf.txt")
	l3 := filepath.Join(oracle, "llama3")
	g3 := readTokGolden(t, l3)
	c13 := g3.Cases[13] // "windows\r\nline\r\nendings\r\n"
	if err := os.WriteFile(crlf, []byte(c13.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	var wantJSON strings.Builder // the tokens of ids_with_special: <s>, then those of ids
	enc := json.NewEncoder(&wantJSON)
	enc.SetEscapeHTML(false)
	enc.Encode(map[string]any{"ids": c0.IDsWithSpecial, "tokens": append([]string{"<s>"}, c0.Tokens...)})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--tokenizer", l2, "--text", c0.Text}, idList(c0.IDsWithSpecial) + "\n"},
		{[]string{"tokenize", "--tokenizer", l2, "--text", c0.Text, "--no-special"}, idList(c0.IDs) + "\n"},
		{[]string{"tokenize", "--tokenizer", l2, "--text", c0.Text, "--json"}, wantJSON.String()},
		{[]string{"tokenize", "--tokenizer", l2, "--decode", idList(c0.IDsWithSpecial)}, c0.DecodedWithSpecial + "\n"},
		{[]string{"tokenize", "--tokenizer", l2, "--decode", idList(c0.IDsWithSpecial), "--skip-special"}, c0.DecodedSkipSpecial + "\n"},
		{[]string{"tokenize", "--tokenizer", l3, "--file", crlf}, idList(c13.IDsWithSpecial) + "\n"},
		{[]string{"tokenize", "--tokenizer", l3, "--decode", idList(c13.IDs), "--json"}, `{"text":"windows\r\nline\r\nendings\r\n"}` + "\n"},
	} {
		r := runVKC(t, dir, nil, c.args...)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("vkc %s: exit %d, stdout %q, stderr %q; want %q", strings.Join(c.args, " "), r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// byteGGUF writes a GGUF file with a small gpt2 vocabulary: the 256 byte characters (ids 0..255
// in byte order) and "Ġw" (256), "or" (257), "Ġwor" (258), and <|end|> (259, control).
func byteGGUF(t *testing.T, path string) {
	var toks []string
	n := 256
	for c := 0; c < 256; c++ {
		if c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE {
			toks = append(toks, string(rune(c)))
		} else {
			toks = append(toks, string(rune(n)))
			n++
		}
	}
	toks = append(toks, "Ġw", "or", "Ġwor", "<|end|>")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = 1
	}
	types[259] = 3
	var b gguf.Builder
	b.Add("tokenizer.ggml.model", gguf.MustValue("gpt2"))
	b.Add("tokenizer.ggml.pre", gguf.MustValue("gpt-2"))
	b.Add("tokenizer.ggml.tokens", gguf.MustValue(toks))
	b.Add("tokenizer.ggml.token_type", gguf.MustValue(types))
	b.Add("tokenizer.ggml.merges", gguf.MustValue([]string{"Ġ w", "o r", "Ġw or"}))
	b.Add("tokenizer.ggml.eos_token_id", gguf.MustValue(uint32(259)))
	data, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTokenizeGGUF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.gguf")
	byteGGUF(t, path)
	// "a world<|end|>": "a" (97), " wor" (258), "l" (108), "d" (100), <|end|> (259).
	code, out, errs := runCLI(t, "tokenize", "--tokenizer", path, "--text", "a world<|end|>")
	if code != 0 || out != "97,258,108,100,259\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = runCLI(t, "tokenize", "--tokenizer", path, "--decode", "97,258,108,100,259", "--skip-special")
	if code != 0 || out != "a world\n" {
		t.Errorf("decode: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestTokenizeErrors(t *testing.T) {
	dir := t.TempDir()
	tj := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(tj, []byte(`{"model":{"type":"WordLevel","vocab":{"a":0,"[UNK]":1},"unk_token":"[UNK]"},"pre_tokenizer":{"type":"WhitespaceSplit"}}`), 0o644)
	badType := filepath.Join(dir, "bad", "tokenizer.json")
	os.MkdirAll(filepath.Dir(badType), 0o755)
	os.WriteFile(badType, []byte(`{"model":{"type":"WordLevel","vocab":{"a":0}},"decoder":{"type":"Sequence","decoders":[{"type":"Nope"}]}}`), 0o644)
	badText := filepath.Join(dir, "bad.txt")
	os.WriteFile(badText, []byte("ok \xff"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tokenize", "--text", "a"}, 2, "--tokenizer FILE is required"},
		{[]string{"tokenize", "--tokenizer", tj}, 2, "want one of --text T and --file F"},
		{[]string{"tokenize", "--tokenizer", tj, "--text", "a", "--file", badText}, 2, "want one of --text T and --file F"},
		{[]string{"tokenize", "--tokenizer", tj, "a"}, 2, `unexpected argument "a"`},
		{[]string{"tokenize", "--tokenizer", tj, "--decode", "0,x"}, 2, `"x" is not a token id`},
		{[]string{"tokenize", "--tokenizer", tj, "--decode", "0", "--text", "a"}, 2, "--decode takes no --text"},
		{[]string{"tokenize", "--tokenizer", tj, "--text", "a", "--skip-special"}, 2, "--skip-special goes with --decode"},
		{[]string{"tokenize", "--tokenizer", tj, "--decode", "0,7"}, 1, "id 7 (position 1) is not in the vocabulary (ids 0..1)"},
		{[]string{"tokenize", "--tokenizer", tj, "--file", badText}, 1, "bad.txt: text is not valid UTF-8 at byte 3"},
		{[]string{"tokenize", "--tokenizer", filepath.Join(dir, "none.json"), "--text", "a"}, 1, "no such file"},
		{[]string{"tokenize", "--tokenizer", filepath.Dir(badType), "--text", "a"}, 1, `tokenizer.json: decoder.decoders[0]: unknown decoder type "Nope"`},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
	code, out, _ := runCLI(t, "tokenize", "--tokenizer", tj, "--text", "a b a", "--json")
	if code != 0 || out != `{"ids":[0,1,0],"tokens":["a","[UNK]","a"]}`+"\n" {
		t.Errorf("WordLevel --json: exit %d, %q", code, out)
	}
}

// TestBinaryCompileTokenizer: vkc compile --tokenizer records the tokenizer (here by reference,
// relative to the plan's folder) and vkc inspect shows it; a tokenizer with more ids than the
// model's vocabulary (Llama 2's 32000 for tinyllama's 256) is refused.
func TestBinaryCompileTokenizer(t *testing.T) {
	needDevice(t)
	oracle := tokenizerOracle(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tok"), 0o755)
	byteTokenizer(t, filepath.Join(dir, "tok"))
	model, _ := filepath.Abs("../../examples/tinyllama/model.yaml")
	r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "tiny.plan", "--tokenizer", "tok/tokenizer.json", "--tokenizer-ref")
	if r.code != 0 {
		t.Fatalf("compile: exit %d: %s", r.code, r.stderr)
	}
	r = runVKC(t, dir, nil, "inspect", "tiny.plan")
	if want := "tokenizer: tokenizer.json (file tok/tokenizer.json, "; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("inspect: exit %d, stdout lacks %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "x.plan", "--tokenizer-ref"); r.code != 1 || !strings.Contains(r.stderr, "the model names no tokenizer and none was given") {
		t.Errorf("--tokenizer-ref alone: exit %d, %s", r.code, r.stderr)
	}
	l2 := filepath.Join(oracle, "llama2", "tokenizer.json")
	if r := runVKC(t, dir, nil, "compile", "-q", model, "-o", "x.plan", "--tokenizer", l2); r.code != 1 || !strings.Contains(r.stderr, "has ids up to 31999, but the model's logits cover 256 tokens") {
		t.Errorf("Llama 2's tokenizer for tinyllama: exit %d, %s", r.code, r.stderr)
	}
}
