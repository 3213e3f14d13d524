package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token matched in the text before the model runs (tokenizer.json's
// added_tokens): special tokens such as <|im_start|>, and others such as Qwen's <think>.
type AddedToken struct {
	ID      int32
	Content string
	Special bool // skipped by Decode with SkipSpecial
	// SingleWord: only matched when no word character touches it on either side.
	// LStrip, RStrip: the match swallows the whitespace before / after it.
	// Normalized: matched in the normalized text (its content normalized too) rather than in
	// the input as written.
	SingleWord, LStrip, RStrip, Normalized bool
}

// segment is a piece of the input: text for the model, or an added token (id ≥ 0).
type segment struct {
	text    string
	id      int32
	atStart bool
}

// addedMatcher finds added tokens leftmost-longest, like the Aho-Corasick automaton (MatchKind::
// LeftmostLongest) of the Rust library: at the first position where any token matches, the
// longest one wins; the next search starts after it.
type addedMatcher struct {
	nodes []trieNode
	first [256]bool
	toks  []AddedToken
}

type trieNode struct {
	next map[byte]int32
	tok  int32 // index into toks, -1 for none
}

func newAddedMatcher(toks []AddedToken, content func(AddedToken) string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{tok: -1}}}
	for _, t := range toks {
		c := content(t)
		if c == "" {
			continue
		}
		idx := int32(len(m.toks))
		m.toks = append(m.toks, t)
		n := int32(0)
		for i := 0; i < len(c); i++ {
			nx, ok := m.nodes[n].next[c[i]]
			if !ok {
				nx = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{tok: -1})
				if m.nodes[n].next == nil {
					m.nodes[n].next = map[byte]int32{}
				}
				m.nodes[n].next[c[i]] = nx
			}
			n = nx
		}
		if m.nodes[n].tok < 0 { // two tokens with the same content: the first one listed wins
			m.nodes[n].tok = idx
		}
		m.first[c[0]] = true
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.toks) == 0 }

// longestAt returns the token matching longest at s[i:] and its end, or -1.
func (m *addedMatcher) longestAt(s string, i int) (tok int32, end int) {
	tok, end = -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if t := m.nodes[n].tok; t >= 0 {
			tok, end = t, j+1
		}
	}
	return tok, end
}

func isWordRune(r rune) bool { return isRustWord(r) }

// split appends the segments of s: added tokens with their ids, the text between them as
// segments for the model (HF's AddedVocabulary::find_matches and split_with_indices). Empty
// pieces are dropped.
func (m *addedMatcher) split(dst []segment, s string, atStart bool) []segment {
	if m.empty() {
		if s != "" {
			dst = append(dst, segment{s, -1, atStart})
		}
		return dst
	}
	prev := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, end := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := m.toks[ti]
		start, stop := i, end
		i = end
		if t.SingleWord {
			before, after := false, false
			if start > 0 {
				r, _ := utf8.DecodeLastRuneInString(s[:start])
				before = isWordRune(r)
			}
			if stop < len(s) {
				r, _ := utf8.DecodeRuneInString(s[stop:])
				after = isWordRune(r)
			}
			if before || after {
				continue
			}
		}
		if t.LStrip {
			for start > prev {
				r, n := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if t.RStrip {
			for stop < len(s) {
				r, n := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += n
			}
			i = stop
		}
		if prev < start {
			dst = append(dst, segment{s[prev:start], -1, atStart && prev == 0})
		}
		dst = append(dst, segment{s[start:stop], t.ID, atStart && start == 0})
		prev = stop
	}
	if prev < len(s) {
		dst = append(dst, segment{s[prev:], -1, atStart && prev == 0})
	}
	return dst
}
