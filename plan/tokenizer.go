package plan

import (
	"fmt"
	"math"
)

// Tokenizer formats: what Tokenizer.Data (or the file it refers to) holds.
const (
	// TokenizerJSON is a Hugging Face tokenizer.json.
	TokenizerJSON = "tokenizer.json"
	// TokenizerGGUF is a GGUF file whose metadata holds a vocabulary (the tokenizer.* keys).
	TokenizerGGUF = "gguf"
)

// Tokenizer is the text side of a language-model plan: how a prompt becomes the token ids the
// functions take, and ids become text again. The runtime does not read it; package tokenizer
// builds a tokenizer from it (tokenizer.FromPlan) and records one (tokenizer.Record).
type Tokenizer struct {
	// Format is TokenizerJSON or TokenizerGGUF.
	Format string
	// Data is the tokenizer's bytes when the plan holds them; nil when Ref names a file instead.
	Data []byte
	// Ref, when non-nil, names the file holding the bytes (Data is then nil).
	Ref *Source
	// Config is the tokenizer_config.json that came with a tokenizer.json (BOS/EOS, chat
	// template, clean-up), always inline; nil when there was none.
	Config []byte
	// BOS and EOS are the beginning- and end-of-sequence token ids, -1 when the source names
	// none. ChatTemplate is the source's chat template (Jinja), "" when it has none.
	BOS, EOS     int32
	ChatTemplate string
	// EOG are the ids besides EOS that end a generation (tokenizer.Tokenizer.EOG: a Hugging Face
	// config's eos_token_id list, a GGUF vocabulary's EOT and EOM), each ≥ 0; nil when none.
	EOG []int32
}

// maxEOG bounds Tokenizer.EOG (real models name a handful).
const maxEOG = 1024

// maxTokenizerText bounds the chat template (real ones are a few KiB).
const maxTokenizerText = 1 << 20

func (v *validator) tokenizer(t *Tokenizer) {
	if t == nil {
		return
	}
	switch t.Format {
	case TokenizerJSON, TokenizerGGUF:
	default:
		v.addf("tokenizer: unknown format %q (want %q or %q)", t.Format, TokenizerJSON, TokenizerGGUF)
	}
	if uint64(len(t.Data)) > math.MaxUint32 || uint64(len(t.Config)) > math.MaxUint32 {
		v.addf("tokenizer: %d bytes, more than the format's 4 GiB", len(t.Data)+len(t.Config))
	}
	if (t.Data == nil) == (t.Ref == nil) {
		v.addf("tokenizer: want exactly one of inline data and a file reference")
	}
	if t.Ref != nil {
		if t.Ref.Path == "" {
			v.addf("tokenizer: reference with an empty path")
		}
		v.str("tokenizer reference", t.Ref.Path)
	}
	if t.Config != nil && t.Format != TokenizerJSON {
		v.addf("tokenizer: a tokenizer_config.json goes with format %q only", TokenizerJSON)
	}
	for _, x := range []struct {
		name string
		id   int32
	}{{"BOS", t.BOS}, {"EOS", t.EOS}} {
		if x.id < -1 {
			v.addf("tokenizer: %s id %d (want -1 for none, or an id)", x.name, x.id)
		}
	}
	for _, id := range t.EOG {
		if id < 0 {
			v.addf("tokenizer: end-of-generation id %d (want an id ≥ 0)", id)
		}
	}
	if len(t.EOG) > maxEOG {
		v.addf("tokenizer: %d end-of-generation ids, more than %d", len(t.EOG), maxEOG)
	}
	if len(t.ChatTemplate) > maxTokenizerText {
		v.addf("tokenizer: chat template of %d bytes, more than %d", len(t.ChatTemplate), maxTokenizerText)
	}
}

// encodeTokenizer is section 5: a bool (present); then format str, a bool (inline) and the data
// bytes or the reference (path str, size u64, SHA-256), a bool and the config bytes, BOS i64,
// EOS i64, the chat template str and (version 4) the other end-of-generation ids, a list of i64.
func encodeTokenizer(p *Plan) []byte {
	var e enc
	t := p.Tokenizer
	e.bool(t != nil)
	if t == nil {
		return e.b
	}
	e.str(t.Format)
	e.bool(t.Ref == nil)
	if t.Ref == nil {
		e.bytes(t.Data)
	} else {
		e.str(t.Ref.Path)
		e.u64(t.Ref.Size)
		e.b = append(e.b, t.Ref.SHA256[:]...)
	}
	e.bool(t.Config != nil)
	if t.Config != nil {
		e.bytes(t.Config)
	}
	e.i64(int64(t.BOS))
	e.i64(int64(t.EOS))
	e.str(t.ChatTemplate)
	e.u32(uint32(len(t.EOG)))
	for _, id := range t.EOG {
		e.i64(int64(id))
	}
	return e.b
}

func decodeTokenizer(d *dec, p *Plan) {
	if !d.bool() {
		return
	}
	t := &Tokenizer{}
	t.Format = d.str()
	if d.bool() {
		t.Data = d.bytes()
		if t.Data == nil {
			t.Data = []byte{}
		}
	} else {
		t.Ref = &Source{Path: d.str(), Size: d.u64()}
		copy(t.Ref.SHA256[:], d.raw(32))
	}
	if d.bool() {
		t.Config = d.bytes()
		if t.Config == nil {
			t.Config = []byte{}
		}
	}
	id := func(what string) int32 {
		x := d.i64()
		if d.err == nil && (x < -1 || x > 1<<31-1) {
			d.fail("tokenizer %s id %d is out of range", what, x)
		}
		return int32(x)
	}
	t.BOS = id("BOS")
	t.EOS = id("EOS")
	t.ChatTemplate = d.str()
	if n := d.count(8); n > 0 {
		t.EOG = make([]int32, n)
		for i := range t.EOG {
			if t.EOG[i] = id("end-of-generation"); t.EOG[i] < 0 && d.err == nil {
				d.fail("tokenizer end-of-generation id %d is negative", t.EOG[i])
			}
		}
	}
	p.Tokenizer = t
}

// String describes the tokenizer in one line (vkc inspect).
func (t *Tokenizer) String() string {
	where := fmt.Sprintf("inline, %s", sizeStr(uint64(len(t.Data))))
	if t.Ref != nil {
		where = fmt.Sprintf("file %s, %s, sha256 %x", t.Ref.Path, sizeStr(t.Ref.Size), t.Ref.SHA256)
	}
	s := fmt.Sprintf("%s (%s)", t.Format, where)
	if t.Config != nil {
		s += fmt.Sprintf(" with tokenizer_config.json (%s)", sizeStr(uint64(len(t.Config))))
	}
	s += fmt.Sprintf("; BOS %d, EOS %d", t.BOS, t.EOS)
	if len(t.EOG) > 0 {
		s += fmt.Sprintf(" (generation also ends at %v)", t.EOG)
	}
	if t.ChatTemplate != "" {
		s += fmt.Sprintf("; chat template of %d bytes", len(t.ChatTemplate))
	}
	return s
}
