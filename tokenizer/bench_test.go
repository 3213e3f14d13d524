package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchTexts returns the oracle corpus joined and repeated to about 1 MiB ("corpus": every
// script, emoji, code), and its English strings alone repeated the same way ("english").
func benchTexts(b *testing.B) map[string]string {
	data, err := os.ReadFile(filepath.Join(oracleDir(b), "corpus.json"))
	if err != nil {
		b.Fatal(err)
	}
	var corpus []string
	if err := json.Unmarshal(data, &corpus); err != nil {
		b.Fatal(err)
	}
	// The English cases: plain prose, contractions, punctuation, numbers, code, the paragraph.
	english := []int{0, 1, 2, 3, 4, 5, 6, 18, 19, 20, 21, 24, 25, 26, 27, 29, 30, 31, 34, 35, 72}
	var en []string
	for _, i := range english {
		en = append(en, corpus[i])
	}
	rep := func(parts []string) string {
		one := strings.Join(parts, "\n")
		return strings.Repeat(one+"\n", 1<<20/len(one)+1)
	}
	return map[string]string{"corpus": rep(corpus), "english": rep(en)}
}

// reportCPU adds MB per CPU-second: on a shared machine wall-clock MB/s falls with the load,
// while the CPU time a pass costs does not (much).
func reportCPU(b *testing.B, bytes int, cpu0 float64) {
	if cpu := cpuSeconds() - cpu0; cpu > 0 && cpu0 >= 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/cpu/1e6, "MB/cpu-s")
	}
}

// BenchmarkEncode measures encoding throughput (MB/s of input, and MB per CPU-second) with a
// warm word cache, as a long-running tokenizer has. Run on one core:
// go test -run '^$' -bench Encode -cpu 1 ./tokenizer
func BenchmarkEncode(b *testing.B) {
	texts := benchTexts(b)
	for _, name := range oracleNames {
		tk, _ := oracleTokenizer(b, name)
		for _, kind := range []string{"english", "corpus"} {
			text := texts[kind]
			b.Run(name+"/"+kind, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				cpu0 := cpuSeconds()
				for b.Loop() {
					if _, err := tk.Encode(text, false); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, len(text), cpu0)
			})
		}
	}
}

// BenchmarkEncodeCold is BenchmarkEncode/english with the word cache emptied before every
// pass: the cost of merging every word once.
func BenchmarkEncodeCold(b *testing.B) {
	text := benchTexts(b)["english"]
	for _, name := range oracleNames {
		tk, _ := oracleTokenizer(b, name)
		bpe := tk.model.(*bpeModel)
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			cpu0 := cpuSeconds()
			for b.Loop() {
				for _, c := range []*wordCache{&bpe.cache, &bpe.rawCache} {
					c.mu.Lock()
					c.m = nil
					c.mu.Unlock()
				}
				if _, err := tk.Encode(text, false); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, len(text), cpu0)
		})
	}
}

// BenchmarkDecode measures decoding throughput (MB/s of text produced).
func BenchmarkDecode(b *testing.B) {
	text := benchTexts(b)["english"]
	for _, name := range oracleNames {
		tk, _ := oracleTokenizer(b, name)
		ids, err := tk.Encode(text, false)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			cpu0 := cpuSeconds()
			for b.Loop() {
				if _, err := tk.Decode(ids, DecodeOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, len(text), cpu0)
		})
	}
}

// BenchmarkEncodeUnigram measures the Unigram tokenizers of testdata/tokenizers/unigram
// (Precompiled normalizer, Viterbi per word, no word cache) on the same texts:
// go test -run '^$' -bench EncodeUnigram -cpu 1 ./tokenizer
func BenchmarkEncodeUnigram(b *testing.B) {
	texts := benchTexts(b)
	for _, name := range []string{"t5", "albert"} {
		tk, err := Load(filepath.Join(unigramDir, name))
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"english", "corpus"} {
			text := texts[kind]
			b.Run(name+"/"+kind, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				cpu0 := cpuSeconds()
				for b.Loop() {
					if _, err := tk.Encode(text, false); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, len(text), cpu0)
			})
		}
	}
}
