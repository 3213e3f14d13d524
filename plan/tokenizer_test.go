package plan

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func withTokenizer(t *Tokenizer) *Plan {
	p := smallPlan()
	p.Tokenizer = t
	return p
}

func TestTokenizerRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		tok  *Tokenizer
	}{
		{"inline with config", &Tokenizer{Format: TokenizerJSON, Data: []byte(`{"model":{}}`), Config: []byte(`{"bos_token":"<s>"}`),
			BOS: 1, EOS: 2, ChatTemplate: "{% for m in messages %}{{ m.content }}{% endfor %}"}},
		{"inline gguf, no ids", &Tokenizer{Format: TokenizerGGUF, Data: []byte("GGUF\x03\x00\x00\x00"), BOS: -1, EOS: -1}},
		{"empty inline", &Tokenizer{Format: TokenizerJSON, Data: []byte{}, Config: []byte{}, BOS: -1, EOS: 0}},
		{"reference", &Tokenizer{Format: TokenizerJSON, Ref: &Source{Path: "tok/tokenizer.json", Size: 9084490, SHA256: [32]byte{1, 2, 3}}, BOS: 128000, EOS: 128001}},
		{"end-of-generation ids", &Tokenizer{Format: TokenizerJSON, Data: []byte(`{}`), BOS: 128000, EOS: 128001, EOG: []int32{128008, 128009}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := withTokenizer(tc.tok)
			b := encode(t, p)
			got, err := Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Tokenizer, tc.tok) {
				t.Fatalf("round trip changed the tokenizer:\n got %+v\nwant %+v", got.Tokenizer, tc.tok)
			}
			if !bytes.Equal(encode(t, got), b) {
				t.Fatal("re-encoding gives different bytes")
			}
			// Every truncation is ErrTruncated and every flipped bit some FormatError.
			for n := 0; n < len(b); n += 7 {
				if _, err := Decode(bytes.NewReader(b[:n])); !errors.Is(err, ErrTruncated) {
					t.Fatalf("truncated to %d: %v", n, err)
				}
			}
			for i := 0; i < len(b)*8; i += 5 {
				c := bytes.Clone(b)
				c[i/8] ^= 1 << (i % 8)
				var fe *FormatError
				if _, err := Decode(bytes.NewReader(c)); err != nil && !errors.As(err, &fe) {
					t.Fatalf("bit %d: %v is not a FormatError", i, err)
				}
			}
		})
	}
}

func TestTokenizerValidate(t *testing.T) {
	for _, tc := range []struct {
		tok  *Tokenizer
		want string
	}{
		{&Tokenizer{Format: "spm", Data: []byte{}}, `tokenizer: unknown format "spm"`},
		{&Tokenizer{Format: TokenizerJSON}, "want exactly one of inline data and a file reference"},
		{&Tokenizer{Format: TokenizerJSON, Data: []byte{}, Ref: &Source{Path: "x"}}, "want exactly one of"},
		{&Tokenizer{Format: TokenizerJSON, Ref: &Source{}}, "reference with an empty path"},
		{&Tokenizer{Format: TokenizerGGUF, Data: []byte{}, Config: []byte{}}, "tokenizer_config.json goes with format"},
		{&Tokenizer{Format: TokenizerJSON, Data: []byte{}, BOS: -2}, "BOS id -2"},
		{&Tokenizer{Format: TokenizerJSON, Data: []byte{}, EOG: []int32{7, -1}}, "end-of-generation id -1"},
		{&Tokenizer{Format: TokenizerJSON, Data: []byte{}, ChatTemplate: strings.Repeat("x", maxTokenizerText+1)}, "chat template of"},
	} {
		err := withTokenizer(tc.tok).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.tok, err, tc.want)
		}
	}
	var sb strings.Builder
	p := withTokenizer(&Tokenizer{Format: TokenizerJSON, Data: make([]byte, 2048), BOS: 1, EOS: 2, EOG: []int32{5, 6}, ChatTemplate: "abc"})
	if err := p.Summary(&sb); err != nil {
		t.Fatal(err)
	}
	if want := "tokenizer: tokenizer.json (inline, 2.0 KiB); BOS 1, EOS 2 (generation also ends at [5 6]); chat template of 3 bytes"; !strings.Contains(sb.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, sb.String())
	}
}
