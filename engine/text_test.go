package engine

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/vkc-project/vkc/internal/oracles"
	"github.com/vkc-project/vkc/tokenizer"
)

// TestTextStream: tokens of hard text (CJK, rare emoji with a joiner, combining accents,
// Fraktur letters that byte-level vocabularies split into byte tokens, byte-fallback tokens of
// Llama 2's) pushed one at a time give pieces that are valid UTF-8 with no replacement
// character, wait while a character is incomplete, and concatenate to the text the tokenizer
// decodes for the whole sequence after the prompt.
func TestTextStream(t *testing.T) {
	dir := oracles.Dir(t, "tokenizers")
	const text = " 今日は 👩🏽‍🚀 e\u0301t\u00e9 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ǅ ok"
	for _, name := range []string{"llama2", "llama3", "qwen3"} {
		tok, err := tokenizer.Load(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := tok.Encode("Say:", true)
		if err != nil {
			t.Fatal(err)
		}
		gen, err := tok.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		st := newTextStream(tok, prompt)
		var got strings.Builder
		waited := 0
		for _, id := range gen {
			piece, err := st.push(id)
			if err != nil {
				t.Fatal(err)
			}
			if piece == "" {
				waited++
			}
			if !utf8.ValidString(piece) || strings.ContainsRune(piece, utf8.RuneError) {
				t.Errorf("%s: piece %q", name, piece)
			}
			got.WriteString(piece)
		}
		rest, err := st.flush()
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(rest)
		all := append(append([]int32(nil), prompt...), gen...)
		full, _ := tok.Decode(all, streamDecode)
		head, _ := tok.Decode(prompt, streamDecode)
		if want := strings.TrimPrefix(full, head); got.String() != want {
			t.Errorf("%s: streamed %q, the whole decode gives %q", name, got.String(), want)
		}
		if waited == 0 {
			t.Errorf("%s: no token ended inside a character: the case checks nothing", name)
		}
	}
}

// TestStopMatcher: text that may begin a stop string is held back, the earliest stop string
// ends the text, and held text that turns out not to be one is released.
func TestStopMatcher(t *testing.T) {
	m := &stopMatcher{stops: []string{"END", "é!"}}
	for _, c := range []struct {
		in, out string
		hit     bool
	}{
		{"abcE", "abc", false}, {"N", "", false}, {"x", "ENx", false}, {"yé", "y", false}, {"?", "é?", false},
		{"zzE", "zz", false}, {"ND tail é!", "", true},
	} {
		out, hit := m.feed(c.in)
		if out != c.out || hit != c.hit {
			t.Errorf("feed %q: %q %v, want %q %v", c.in, out, hit, c.out, c.hit)
		}
	}
	m = &stopMatcher{stops: []string{"ab", "b"}}
	if out, hit := m.feed("xab"); out != "x" || !hit {
		t.Errorf("earliest stop: %q %v", out, hit)
	}
	m = &stopMatcher{stops: []string{"END"}}
	m.feed("theE")
	if s := m.flush(); s != "E" {
		t.Errorf("flush %q", s)
	}
}
