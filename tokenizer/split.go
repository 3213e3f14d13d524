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
	re.findAll(m, s, func(start, end int) {
		if prev != start {
			dst = append(dst, span{prev, start, false})
		}
		dst = append(dst, span{start, end, true})
		prev = end
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

// applyBehavior turns the spans of a pattern into the pieces to keep, in order (HF
// NormalizedString::split). Empty pieces are dropped, as HF's PreTokenizedString::split does.
func applyBehavior(spans []span, b splitBehavior, invert bool, emit func(start, end int)) {
	if invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	out := func(st, en int) {
		if en > st {
			emit(st, en)
		}
	}
	switch b {
	case splitIsolated:
		for _, sp := range spans {
			out(sp.start, sp.end)
		}
	case splitRemoved:
		for _, sp := range spans {
			if !sp.match {
				out(sp.start, sp.end)
			}
		}
	case splitContiguous, splitMergedWithPrevious:
		// Both fold a match into the piece before it; Contiguous also folds gaps into gaps and
		// matches into matches.
		have, prevMatch := false, false
		curS, curE := 0, 0
		for _, sp := range spans {
			var merge bool
			if b == splitContiguous {
				merge = sp.match == prevMatch
			} else {
				merge = sp.match && !prevMatch
			}
			if merge && have {
				curE = sp.end
			} else {
				if have {
					out(curS, curE)
				}
				curS, curE, have = sp.start, sp.end, true
			}
			prevMatch = sp.match
		}
		if have {
			out(curS, curE)
		}
	case splitMergedWithNext:
		// Walk backwards, folding a match into the piece after it.
		type piece struct{ s, e int }
		var rev []piece
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(rev) > 0 {
				rev[len(rev)-1].s = sp.start
			} else {
				rev = append(rev, piece{sp.start, sp.end})
			}
			prevMatch = sp.match
		}
		for i := len(rev) - 1; i >= 0; i-- {
			out(rev[i].s, rev[i].e)
		}
	}
}
