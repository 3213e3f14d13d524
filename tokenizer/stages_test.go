package tokenizer

import (
	"encoding/json"
	"strings"
	"testing"
)

// Per-stage tests. The expected values follow from the Rust library's documented behaviour
// (several are the examples of its documentation: "the-final--countdown", "Hey friend!",
// "Call 123 please", "unaffable"), worked out by hand, not from this code.

func TestNormalizers(t *testing.T) {
	for _, c := range []struct{ json, in, want string }{
		{`{"type":"NFC"}`, "cafe\u0301", "café"},
		{`{"type":"NFD"}`, "é", "e\u0301"},
		{`{"type":"NFKC"}`, "ﬁ Ａ１ K", "fi A1 K"},
		{`{"type":"NFKD"}`, "ﬁé", "fie\u0301"},
		{`{"type":"Lowercase"}`, "HeLLo İ ΣΑ", "hello i\u0307 σα"},
		{`{"type":"Strip","strip_left":true,"strip_right":false}`, " \t x \n", "x \n"},
		{`{"type":"Strip","strip_left":true,"strip_right":true}`, "\u3000x\u0085", "x"},
		{`{"type":"StripAccents"}`, "e\u0301a\u0308", "ea"},
		{`{"type":"Prepend","prepend":"▁"}`, "hi", "▁hi"},
		{`{"type":"Prepend","prepend":"▁"}`, "", ""}, // an empty piece stays empty
		{`{"type":"Replace","pattern":{"String":" "},"content":"▁"}`, " a b ", "▁a▁b▁"},
		{`{"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "}`, "a \t\n b", "a b"},
		{`{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]}`,
			"Hello world", "▁Hello▁world"},
		{`{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true}`,
			"Héllo\tWORLD\u0000中国", "hello world 中  国 "}, // NUL is removed, tab becomes a space
		{`{"type":"ByteLevel"}`, "a é", "aĠÃ©"},
	} {
		n, err := parseNormalizer(json.RawMessage(c.json), "normalizer")
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if got := n.normalize(c.in, &scratch{}); got != c.want {
			t.Errorf("%s on %q: got %q, want %q", c.json, c.in, got, c.want)
		}
	}
}

func preTokens(t *testing.T, js, in string) []string {
	t.Helper()
	p, err := parsePreTokenizer(json.RawMessage(js), "pre_tokenizer")
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	var out []string
	err = p.preTokenize(pretok{in, true, false}, &scratch{}, func(w pretok) error {
		out = append(out, w.mapped().text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPreTokenizers(t *testing.T) {
	split := func(behavior string) string {
		return `{"type":"Split","pattern":{"String":"-"},"behavior":"` + behavior + `","invert":false}`
	}
	for _, c := range []struct {
		json, in string
		want     []string
	}{
		{split("Removed"), "the-final--countdown", []string{"the", "final", "countdown"}},
		{split("Isolated"), "the-final--countdown", []string{"the", "-", "final", "-", "-", "countdown"}},
		{split("MergedWithPrevious"), "the-final--countdown", []string{"the-", "final-", "-", "countdown"}},
		{split("MergedWithNext"), "the-final--countdown", []string{"the", "-final", "-", "-countdown"}},
		{split("Contiguous"), "the-final--countdown", []string{"the", "-", "final", "--", "countdown"}},
		{`{"type":"Split","pattern":{"Regex":"\\d+"},"behavior":"Removed","invert":true}`, "ab12cd345", []string{"12", "345"}},
		{`{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`, "Hello world's  x",
			[]string{"Hello", "Ġworld", "'s", "Ġ", "Ġx"}},
		{`{"type":"ByteLevel","add_prefix_space":true,"use_regex":false}`, "héllo", []string{"ĠhÃ©llo"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`, "Hey friend!",
			[]string{"▁Hey", "▁friend!"}},
		{`{"type":"Metaspace","replacement":"▁","add_prefix_space":false}`, "Hey friend!", []string{"Hey", "▁friend!"}},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`, "Hey friend!", []string{"▁Hey▁friend!"}},
		{`{"type":"Whitespace"}`, "Hello there!  How's it?", []string{"Hello", "there", "!", "How", "'", "s", "it", "?"}},
		{`{"type":"WhitespaceSplit"}`, "Hello there!\u3000x", []string{"Hello", "there!", "x"}},
		{`{"type":"Punctuation","behavior":"Isolated"}`, "Hey friend!?", []string{"Hey friend", "!", "?"}},
		{`{"type":"Digits","individual_digits":true}`, "Call 123 please", []string{"Call ", "1", "2", "3", " please"}},
		{`{"type":"Digits","individual_digits":false}`, "Call 123 please", []string{"Call ", "123", " please"}},
		{`{"type":"BertPreTokenizer"}`, "Hey friend!     How are you?!?", []string{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?"}},
		{`{"type":"CharDelimiterSplit","delimiter":"|"}`, "a|b||c", []string{"a", "b", "c"}},
		{`{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Digits","individual_digits":true}]}`,
			"ab12 c3", []string{"ab", "1", "2", "c", "3"}},
	} {
		got := preTokens(t, c.json, c.in)
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s on %q: got %q, want %q", c.json, c.in, got, c.want)
		}
	}
}

// tinyTokenizer builds a tokenizer.json from a model and optional stages.
func tinyTokenizer(t *testing.T, modelJSON string, extra map[string]string, added string) *Tokenizer {
	t.Helper()
	parts := []string{`"model":` + modelJSON}
	for k, v := range extra {
		parts = append(parts, `"`+k+`":`+v)
	}
	if added == "" {
		added = "[]"
	}
	parts = append(parts, `"added_tokens":`+added)
	tk, err := Parse([]byte("{"+strings.Join(parts, ",")+"}"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestBPEModel(t *testing.T) {
	// Ranks: (a,b) 0, (b,c) 1, (ab,c) 2. "abc": a+b first (rank 0) then ab+c.
	// "bcb": b+c (rank 1) leaves "bc b". "aab": a a b → a ab (leftmost lowest rank is (a,b) at 1).
	vocab := `{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5,"<unk>":6,"<0x78>":7}`
	bpe := `{"type":"BPE","vocab":` + vocab + `,"merges":["a b","b c","ab c"],"unk_token":"<unk>"}`
	tk := tinyTokenizer(t, bpe, nil, "")
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"abc", []int32{5}}, {"bcb", []int32{4, 1}}, {"aab", []int32{0, 3}}, {"", []int32{}},
		{"azzb", []int32{0, 6, 6, 1}}, // unknown characters, not fused
	} {
		got, err := tk.Encode(c.in, false)
		if err != nil || !equalIDs(got, c.want) {
			t.Errorf("%q: got %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	// fuse_unk joins neighbouring unknowns; byte_fallback uses <0xNN> where all bytes exist.
	fused := tinyTokenizer(t, `{"type":"BPE","vocab":`+vocab+`,"merges":[["a","b"]],"unk_token":"<unk>","fuse_unk":true,"byte_fallback":true}`, nil, "")
	if got, _ := fused.Encode("azzb", false); !equalIDs(got, []int32{0, 6, 1}) {
		t.Errorf("fuse_unk: got %v, want [0 6 1]", got)
	}
	if got, _ := fused.Encode("axb", false); !equalIDs(got, []int32{0, 7, 1}) {
		t.Errorf("byte_fallback: got %v, want [0 7 1]", got)
	}
	// ignore_merges: a word in the vocabulary is one token even when merges would not build it.
	im := tinyTokenizer(t, `{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5},"merges":["b c"],"ignore_merges":true}`, nil, "")
	if got, _ := im.Encode("abc", false); !equalIDs(got, []int32{5}) {
		t.Errorf("ignore_merges: got %v, want [5]", got)
	}
	plain := tinyTokenizer(t, `{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5},"merges":["b c"]}`, nil, "")
	if got, _ := plain.Encode("abc", false); !equalIDs(got, []int32{0, 4}) {
		t.Errorf("without ignore_merges: got %v, want [0 4]", got)
	}
	// continuing_subword_prefix and end_of_word_suffix decorate the characters.
	affix := tinyTokenizer(t, `{"type":"BPE","vocab":{"a":0,"##b":1,"##c</w>":2,"a##b":3,"ab":4,"ab##c</w>":5,"abc</w>":6},
		"merges":["a ##b","ab ##c</w>"],"continuing_subword_prefix":"##","end_of_word_suffix":"</w>"}`, nil, "")
	if got, _ := affix.Encode("abc", false); !equalIDs(got, []int32{6}) {
		t.Errorf("affixes: got %v, want [6]", got)
	}
}

func TestWordPieceAndWordLevel(t *testing.T) {
	wp := tinyTokenizer(t, `{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":9,
		"vocab":{"[UNK]":0,"un":1,"##aff":2,"##able":3,"aff":4}}`,
		map[string]string{"pre_tokenizer": `{"type":"WhitespaceSplit"}`, "decoder": `{"type":"WordPiece","prefix":"##","cleanup":true}`}, "")
	got, err := wp.Encode("unaffable aff unable unaffables", false)
	// unaffables has 10 characters > 9: unknown; "unable": un + ##able.
	if want := []int32{1, 2, 3, 4, 1, 3, 0}; err != nil || !equalIDs(got, want) {
		t.Errorf("WordPiece: got %v, %v; want %v", got, err, want)
	}
	if s, _ := wp.Decode([]int32{1, 2, 3, 4}, DecodeOptions{}); s != "unaffable aff" {
		t.Errorf("WordPiece decode: %q", s)
	}
	wl := tinyTokenizer(t, `{"type":"WordLevel","vocab":{"<unk>":0,"hello":1,"world":2},"unk_token":"<unk>"}`,
		map[string]string{"pre_tokenizer": `{"type":"Whitespace"}`}, "")
	if got, _ := wl.Encode("hello big world", false); !equalIDs(got, []int32{1, 0, 2}) {
		t.Errorf("WordLevel: %v", got)
	}
}

func TestPostProcessors(t *testing.T) {
	vocab := `{"type":"WordLevel","vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"x":3,"<s>":4,"</s>":5},"unk_token":"[UNK]"}`
	for _, c := range []struct {
		post string
		want []int32
	}{
		{`{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"</s>","type_id":0}}],
		  "pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[4],"tokens":["<s>"]},"</s>":{"id":"</s>","ids":[5],"tokens":["</s>"]}}}`, []int32{4, 3, 3, 5}},
		{`{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]}`, []int32{1, 3, 3, 2}},
		{`{"type":"RobertaProcessing","sep":["</s>",5],"cls":["<s>",4],"trim_offsets":true,"add_prefix_space":false}`, []int32{4, 3, 3, 5}},
		{`{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true}`, []int32{3, 3}},
		{`{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]}]}`, []int32{1, 3, 3, 2}},
	} {
		tk := tinyTokenizer(t, vocab, map[string]string{"pre_tokenizer": `{"type":"WhitespaceSplit"}`, "post_processor": c.post}, "")
		got, _ := tk.Encode("x x", true)
		if !equalIDs(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.post, got, c.want)
		}
		if got, _ := tk.Encode("x x", false); !equalIDs(got, []int32{3, 3}) {
			t.Errorf("%s without special tokens: got %v, want [3 3]", c.post, got)
		}
	}
}

func TestDecoders(t *testing.T) {
	for _, c := range []struct {
		json   string
		tokens []string
		want   string
	}{
		{`{"type":"ByteLevel"}`, []string{"Hello", "Ġw", "Ã©"}, "Hello wé"},
		{`{"type":"ByteLevel"}`, []string{"Ã"}, "\uFFFD"},            // half a UTF-8 sequence
		{`{"type":"ByteLevel"}`, []string{"<｜x｜>", "Ġa"}, "<｜x｜> a"}, // characters outside the table stand for themselves
		{`{"type":"ByteFallback"}`, []string{"a", "<0xE2>", "<0x96>", "<0x81>", "b"}, "a▁b"},
		{`{"type":"ByteFallback"}`, []string{"<0xE2>", "<0x96>", "a"}, "\uFFFD\uFFFDa"},
		{`{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`,
			[]string{"▁Hello", "▁world", "<0x21>"}, "Hello world!"},
		{`{"type":"Strip","content":"x","start":2,"stop":1}`, []string{"xxxaxx", "b"}, "xaxb"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"always"}`, []string{"▁Hey", "▁friend"}, "Hey friend"},
		{`{"type":"Metaspace","replacement":"▁","prepend_scheme":"never"}`, []string{"▁Hey", "▁friend"}, " Hey friend"},
		{`{"type":"BPEDecoder","suffix":"</w>"}`, []string{"hel", "lo</w>", "wor", "ld</w>"}, "hello world"},
		{`{"type":"CTC","pad_token":"<pad>","word_delimiter_token":"|","cleanup":true}`,
			[]string{"<pad>", "h", "h", "e", "l", "l", "<pad>", "l", "o", "|", "w"}, "hello w"},
		{`{"type":"WordPiece","prefix":"##","cleanup":true}`, []string{"I", "do", "n't", "like", "it", "##s", "!"}, "I don't like its!"},
	} {
		d, err := parseDecoder(json.RawMessage(c.json), "decoder")
		if err != nil {
			t.Errorf("%s: %v", c.json, err)
			continue
		}
		if got := strings.Join(d.decodeChain(c.tokens), ""); got != c.want {
			t.Errorf("%s on %q: got %q, want %q", c.json, c.tokens, got, c.want)
		}
	}
}

// byteIdentityJSON is a byte-level BPE whose ids are the bytes themselves (no merges), so an
// encoding shows exactly which bytes reached the model.
func byteIdentityJSON() string {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[byteToStr[b]] = b
	}
	v, _ := json.Marshal(vocab)
	return `{"type":"BPE","vocab":` + string(v) + `,"merges":[]}`
}

func TestAddedTokens(t *testing.T) {
	tok := func(id int, content string, flags string) string {
		return `{"id":` + strings.TrimSpace(string(mustJSON(id))) + `,"content":` + string(mustJSON(content)) + `,` + flags + `}`
	}
	plain := `"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true`
	added := "[" + strings.Join([]string{
		tok(300, "[M]", plain),
		tok(301, "[L]", `"single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true`),
		tok(302, "[R]", `"single_word":false,"lstrip":false,"rstrip":true,"normalized":false,"special":true`),
		tok(303, "[W]", `"single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false`),
		tok(304, "hello", `"single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false`),
		tok(305, "<a>", plain),
		tok(306, "<a><b>", plain),
	}, ",") + "]"
	stages := map[string]string{
		"normalizer":    `{"type":"Lowercase"}`,
		"pre_tokenizer": `{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}`,
		"decoder":       `{"type":"ByteLevel"}`,
	}
	tk := tinyTokenizer(t, byteIdentityJSON(), stages, added)
	for _, c := range []struct {
		in   string
		want []int32
	}{
		{"a [M] b", []int32{'a', ' ', 300, ' ', 'b'}},
		{"a  [L] b", []int32{'a', 301, ' ', 'b'}}, // lstrip takes the spaces before
		{"a [R]  b", []int32{'a', ' ', 302, 'b'}}, // rstrip the spaces after
		{"a [W] b", []int32{'a', ' ', 303, ' ', 'b'}},
		{"a[W] b", []int32{'a', '[', 'w', ']', ' ', 'b'}}, // single_word: a word character touches it (then lowercased)
		{"HeLLo x", []int32{304, ' ', 'x'}},               // normalized: matched after Lowercase
		{"<a><b><a>", []int32{306, 305}},                  // leftmost-longest
		{"[M][M]", []int32{300, 300}},
	} {
		got, err := tk.Encode(c.in, false)
		if err != nil || !equalIDs(got, c.want) {
			t.Errorf("%q: got %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	ids := []int32{'a', 300, 303, 'b'}
	if s, _ := tk.Decode(ids, DecodeOptions{}); s != "a[M][W]b" {
		t.Errorf("decode: %q", s)
	}
	if s, _ := tk.Decode(ids, DecodeOptions{SkipSpecial: true}); s != "a[W]b" { // [W] is not special
		t.Errorf("decode skipping special tokens: %q", s)
	}
	if _, err := tk.Decode([]int32{'a', 9999}, DecodeOptions{}); err == nil || !strings.Contains(err.Error(), "id 9999 (position 1)") {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := tk.Encode("ok \xff", false); err == nil || !strings.Contains(err.Error(), "byte 3") {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

// TestParseErrors: an unknown or unsupported type, or a bad field, is an error naming its place.
func TestParseErrors(t *testing.T) {
	bpe := `{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]}`
	for _, c := range []struct{ json, want string }{
		{`{"model":` + bpe + `,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Foo"}]}}`,
			`pre_tokenizer.pretokenizers[1]: unknown pre-tokenizer type "Foo"`},
		{`{"model":` + bpe + `,"normalizer":{"type":"Sequence","normalizers":[{"type":"Precompiled","precompiled_charsmap":"AAAAAA=="}]}}`,
			`normalizer.normalizers[0]: precompiled_charsmap: a trie of 0 bytes`},
		{`{"model":` + bpe + `,"normalizer":{"type":"Nmt"}}`, `normalizer: normalizer type "Nmt" is not supported`},
		{`{"model":` + bpe + `,"decoder":{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Bar"}]}}`,
			`decoder.decoders[1]: unknown decoder type "Bar"`},
		{`{"model":` + bpe + `,"post_processor":{"type":"Baz"}}`, `post_processor: unknown post-processor type "Baz"`},
		{`{"model":{"type":"Unigram","vocab":[["a",0]],"unk_id":1}}`, `model.unk_id: 1 is outside the 1 pieces`},
		{`{"model":{"type":"Unigram","vocab":{"a":0}}}`, `model.vocab: want a list of [piece, score] for Unigram`},
		{`{"model":{"type":"Qux","vocab":{}}}`, `model: unknown model type "Qux"`},
		{`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a b"]}}`, `model.merges[0]: "b" is not in the vocabulary`},
		{`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}}`, `model.merges[0]: the merge of "a" and "b", "ab", is not in the vocabulary`},
		{`{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b c"]}}`, `model.merges[0]: "a b c" is not two tokens`},
		{`{"model":` + bpe + `,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?<=x)y"},"behavior":"Isolated"}}`,
			`pre_tokenizer: pattern: regex "(?<=x)y" at offset 2: lookbehind`},
		{`{"model":` + bpe + `,"pre_tokenizer":{"type":"Split","pattern":{"String":"x"},"behavior":"Sideways"}}`,
			`pre_tokenizer: unknown split behavior "Sideways"`},
		{`{"model":` + bpe + `,"normalizer":{"kind":"NFC"}}`, `normalizer: no "type" field`},
		{`{"model":{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}}`, `model.vocab: id 0 is given to both`},
		{`{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"dropout":0.1}}`, `BPE dropout 0.1 is not supported`},
		{`{"model":` + bpe + `,"added_tokens":[{"content":"zz","special":true}]}`, `added_tokens[0]: "zz" has no id`},
		{`{"model":` + bpe + `,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}}}`,
			`post_processor.single[0]: special token "<s>" is not in special_tokens`},
	} {
		_, err := Parse([]byte(c.json), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n error %v\n want %q", c.json, err, c.want)
		}
	}
	if _, err := Parse([]byte(`{"model":`+bpe+`}`), []byte(`{"bos_token":"<zz>"}`)); err == nil ||
		!strings.Contains(err.Error(), `tokenizer_config.json: bos_token "<zz>" is not in the vocabulary`) {
		t.Errorf("config: %v", err)
	}
}
