package tokenizer

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// precompiledNorm is the Precompiled normalizer: SentencePiece's precompiled_charsmap, the
// normalization rules (nmt_nfkc and the like) compiled into a double-array trie (Darts-clone's
// layout) from input strings to offsets of their replacements in a blob of NUL-terminated
// strings. The blob is: the trie's size in bytes (uint32, little endian), the trie (uint32
// units), then the replacements.
//
// It applies them as the Rust library does, which is not quite SentencePiece's longest match:
// the text is cut into extended grapheme clusters; a cluster shorter than 6 bytes with a rule for
// a prefix of it is replaced whole by the replacement of the shortest such prefix; otherwise
// each character of the cluster is replaced by its own rule, if it has one.
type precompiledNorm struct {
	trie       []uint32
	normalized string
}

func parsePrecompiled(blob []byte) (*precompiledNorm, error) {
	if len(blob) < 4 {
		return nil, errors.New("precompiled_charsmap: shorter than its 4-byte header")
	}
	n := binary.LittleEndian.Uint32(blob)
	if uint64(n) > uint64(len(blob)-4) || n%4 != 0 || n == 0 {
		return nil, fmt.Errorf("precompiled_charsmap: a trie of %d bytes in a blob of %d", n, len(blob))
	}
	trie := make([]uint32, n/4)
	for i := range trie {
		trie[i] = binary.LittleEndian.Uint32(blob[4+4*i:])
	}
	return &precompiledNorm{trie: trie, normalized: string(blob[4+n:])}, nil
}

func parsePrecompiledBase64(s, where string) (*precompiledNorm, error) {
	blob, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: precompiled_charsmap: %v", where, err)
	}
	p, err := parsePrecompiled(blob)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return p, nil
}

// Darts-clone's unit fields.
func dartsHasLeaf(u uint32) bool  { return (u>>8)&1 == 1 }
func dartsValue(u uint32) uint32  { return u & (1<<31 - 1) }
func dartsLabel(u uint32) uint32  { return u & (1<<31 | 0xff) }
func dartsOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// firstMatch returns the value of the shortest key of the trie that is a prefix of s (Darts'
// commonPrefixSearch, first result).
func (p *precompiledNorm) firstMatch(s string) (uint32, bool) {
	t := p.trie
	pos := dartsOffset(t[0])
	for i := 0; i < len(s); i++ {
		c := uint32(s[i])
		if c == 0 {
			break
		}
		pos ^= c
		if int(pos) >= len(t) {
			return 0, false
		}
		u := t[pos]
		if dartsLabel(u) != c {
			return 0, false
		}
		pos ^= dartsOffset(u)
		if int(pos) >= len(t) {
			return 0, false
		}
		if dartsHasLeaf(u) {
			return dartsValue(t[pos]), true
		}
	}
	return 0, false
}

// transform returns the replacement of chunk's first rule, if any.
func (p *precompiledNorm) transform(chunk string) (string, bool) {
	v, ok := p.firstMatch(chunk)
	if !ok || int(v) > len(p.normalized) {
		return "", false
	}
	rest := p.normalized[v:]
	if i := strings.IndexByte(rest, 0); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

func (p *precompiledNorm) normalize(s string, _ *scratch) string {
	var b strings.Builder
	b.Grow(len(s))
	state := -1
	for s != "" {
		var g string
		g, s, _, state = uniseg.FirstGraphemeClusterInString(s, state)
		if len(g) < 6 {
			if r, ok := p.transform(g); ok {
				b.WriteString(r)
				continue
			}
		}
		for i := 0; i < len(g); {
			_, n := utf8.DecodeRuneInString(g[i:])
			part := g[i : i+n]
			if r, ok := p.transform(part); ok {
				b.WriteString(r)
			} else {
				b.WriteString(part)
			}
			i += n
		}
	}
	return b.String()
}
