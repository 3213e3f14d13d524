package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// splitBehavior is what a split does with the delimiters it finds (HF SplitDelimiterBehavior).
type splitBehavior uint8

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

func parseBehavior(s, where string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return splitRemoved, nil
	case "Isolated":
		return splitIsolated, nil
	case "MergedWithPrevious":
		return splitMergedWithPrevious, nil
	case "MergedWithNext":
		return splitMergedWithNext, nil
	case "Contiguous":
		return splitContiguous, nil
	}
	return 0, fmt.Errorf("%s: unknown split behavior %q (want Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)", where, s)
}

// span is a piece of a string: [start, end), and whether a pattern matched it.
type span struct {
	start, end int
	match      bool
}

// matchSpans covers s with the matches of re and the gaps between them (HF's Pattern::find_matches
// for an Oniguruma regex).
func matchSpans(dst []span, re *Regex, m *reMachine, s string) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	prev := 0
	re.findAll(m, s, func(start, end int) bool {
		if prev != start {
			dst = append(dst, span{prev, start, false})
		}
		dst = append(dst, span{start, end, true})
		prev = end
		return true
	})
	if prev != len(s) {
		dst = append(dst, span{prev, len(s), false})
	}
	return dst
}

// predSpans covers s with one match per rune that pred accepts and the gaps between them (HF's
// Pattern::find_matches for a char predicate).
func predSpans(dst []span, pred func(rune) bool, s string) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	last := 0
	for i, r := range s {
		if pred(r) {
			n := utf8.RuneLen(r)
			if n < 0 {
				n = 1
			}
			if last < i {
				dst = append(dst, span{last, i, false})
			}
			dst = append(dst, span{i, i + n, true})
			last = i + n
		}
	}
	if last < len(s) {
		dst = append(dst, span{last, len(s), false})
	}
	return dst
}

// literalSpans covers s with the non-overlapping occurrences of lit and the gaps between them.
func literalSpans(dst []span, lit, s string) []span {
	if s == "" {
		return append(dst, span{0, 0, false})
	}
	prev := 0
	for i := 0; i+len(lit) <= len(s); {
		if s[i:i+len(lit)] == lit {
			if prev != i {
				dst = append(dst, span{prev, i, false})
			}
			dst = append(dst, span{i, i + len(lit), true})
			i += len(lit)
			prev = i
			continue
		}
		i++
	}
	if prev != len(s) {
		dst = append(dst, span{prev, len(s), false})
	}
	return dst
}

// applyBehavior appends to dst the pieces to keep of the spans of a pattern, in order (HF
// NormalizedString::split). Empty pieces are dropped, as HF's PreTokenizedString::split does.
// spans must not alias dst's free capacity.
func applyBehavior(dst, spans []span, b splitBehavior, invert bool) []span {
	out := func(st, en int) {
		if en > st {
			dst = append(dst, span{st, en, false})
		}
	}
	isMatch := func(sp span) bool { return sp.match != invert }
	switch b {
	case splitIsolated:
		for _, sp := range spans {
			out(sp.start, sp.end)
		}
	case splitRemoved:
		for _, sp := range spans {
			if !isMatch(sp) {
				out(sp.start, sp.end)
			}
		}
	case splitContiguous, splitMergedWithPrevious:
		// Both fold a match into the piece before it; Contiguous also folds gaps into gaps and
		// matches into matches.
		have, prevMatch := false, false
		curS, curE := 0, 0
		for _, sp := range spans {
			m := isMatch(sp)
			var merge bool
			if b == splitContiguous {
				merge = m == prevMatch
			} else {
				merge = m && !prevMatch
			}
			if merge && have {
				curE = sp.end
			} else {
				if have {
					out(curS, curE)
				}
				curS, curE, have = sp.start, sp.end, true
			}
			prevMatch = m
		}
		if have {
			out(curS, curE)
		}
	case splitMergedWithNext:
		// Walk backwards, folding a match into the piece after it, then reverse.
		mark := len(dst)
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			m := isMatch(sp)
			if m && !prevMatch && len(dst) > mark {
				dst[len(dst)-1].start = sp.start
			} else {
				dst = append(dst, span{sp.start, sp.end, false})
			}
			prevMatch = m
		}
		for i, j := mark, len(dst)-1; i < j; i, j = i+1, j-1 {
			dst[i], dst[j] = dst[j], dst[i]
		}
		kept := dst[:mark]
		for _, sp := range dst[mark:] {
			if sp.end > sp.start {
				kept = append(kept, sp)
			}
		}
		dst = kept
	}
	return dst
}
