package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vkc-project/vkc/internal/oracles"
)

// The oracle: ../shared/oracles/tokenizers (written by no one in this project) holds real
// tokenizer.json files and the ids and decoded text other implementations give for a corpus of
// hard strings. Where transformers.js and the Rust library disagree (U+0085 and U+FEFF, whose
// whitespace-ness differs between JavaScript's RegExp and Oniguruma), a case carries the Rust
// library's answer in hf_tokenizers, and that is what this package must give.

type goldenFile struct {
	Tokenizer string       `json:"tokenizer"`
	Cases     []goldenCase `json:"cases"`
}

type goldenCase struct {
	Text               string  `json:"text"`
	IDs                []int32 `json:"ids"`
	IDsWithSpecial     []int32 `json:"ids_with_special"`
	Decoded            string  `json:"decoded"`
	DecodedNoCleanup   string  `json:"decoded_no_cleanup"`
	DecodedWithSpecial string  `json:"decoded_with_special"`
	DecodedSkipSpecial string  `json:"decoded_skip_special"`
	HF                 *struct {
		IDs            []int32 `json:"ids"`
		IDsWithSpecial []int32 `json:"ids_with_special"`
		Decoded        string  `json:"decoded"`
	} `json:"hf_tokenizers"`
}

// oracleDir returns ../shared/oracles/tokenizers relative to the module root, or skips.
func oracleDir(t testing.TB) string {
	t.Helper()
	return filepath.Dir(oracles.File(t, "tokenizers", "corpus.json"))
}

var (
	oracleMu    sync.Mutex
	oracleCache = map[string]*Tokenizer{}
)

// oracleTokenizer loads NAME's tokenizer once per test binary (the files are 2–11 MB).
func oracleTokenizer(t testing.TB, name string) (*Tokenizer, *goldenFile) {
	t.Helper()
	dir := filepath.Join(oracleDir(t), name)
	oracleMu.Lock()
	defer oracleMu.Unlock()
	tk, ok := oracleCache[name]
	if !ok {
		var err error
		if tk, err = Load(dir); err != nil {
			t.Fatalf("load %s: %v", name, err)
		}
		oracleCache[name] = tk
	}
	data, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s/golden.json: %v", name, err)
	}
	return tk, &g
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var oracleNames = []string{"llama2", "llama3", "qwen3"}

// TestOracle checks every case of every oracle tokenizer: ids with and without special tokens,
// and the four decodes, byte for byte.
func TestOracle(t *testing.T) {
	for _, name := range oracleNames {
		t.Run(name, func(t *testing.T) {
			tk, g := oracleTokenizer(t, name)
			if len(g.Cases) != 73 {
				t.Fatalf("golden.json has %d cases, the README says 73", len(g.Cases))
			}
			pass := 0
			for i, c := range g.Cases {
				wantIDs, wantSpecial, wantDecoded := c.IDs, c.IDsWithSpecial, c.Decoded
				if c.HF != nil { // the Rust library's answer, where transformers.js differs
					wantIDs, wantSpecial, wantDecoded = c.HF.IDs, c.HF.IDsWithSpecial, c.HF.Decoded
				}
				ok := true
				check := func(what string, got, want any, eq bool) {
					if !eq {
						ok = false
						t.Errorf("case %d %q: %s:\n got %v\nwant %v", i, trunc(c.Text), what, got, want)
					}
				}
				ids, err := tk.Encode(c.Text, false)
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				check("ids", ids, wantIDs, equalIDs(ids, wantIDs))
				ws, err := tk.Encode(c.Text, true)
				if err != nil {
					t.Fatalf("case %d: %v", i, err)
				}
				check("ids_with_special", ws, wantSpecial, equalIDs(ws, wantSpecial))
				// Decodes start from the recorded ids (transformers.js's, which the README says all
				// decode as the Rust library does), so a decode failure is not an encode failure.
				dec := func(ids []int32, o DecodeOptions) string {
					s, err := tk.Decode(ids, o)
					if err != nil {
						t.Fatalf("case %d: decode: %v", i, err)
					}
					return s
				}
				s := dec(c.IDs, DecodeOptions{})
				check("decoded", q(s), q(c.Decoded), s == c.Decoded)
				s = dec(c.IDs, DecodeOptions{NoCleanup: true})
				check("decoded_no_cleanup", q(s), q(c.DecodedNoCleanup), s == c.DecodedNoCleanup)
				s = dec(c.IDsWithSpecial, DecodeOptions{NoCleanup: true})
				check("decoded_with_special", q(s), q(c.DecodedWithSpecial), s == c.DecodedWithSpecial)
				s = dec(c.IDsWithSpecial, DecodeOptions{NoCleanup: true, SkipSpecial: true})
				check("decoded_skip_special", q(s), q(c.DecodedSkipSpecial), s == c.DecodedSkipSpecial)
				if c.HF != nil {
					s = dec(c.HF.IDs, DecodeOptions{})
					check("hf_tokenizers.decoded", q(s), q(wantDecoded), s == wantDecoded)
				}
				if ok {
					pass++
				}
			}
			t.Logf("%s: %d/%d cases pass (ids, ids_with_special, 4 decodes)", name, pass, len(g.Cases))
		})
	}
}

func q(s string) string { return string(mustJSON(s)) }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func trunc(s string) string {
	r := []rune(s)
	if len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}
