package tokenizer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func findAllStrings(t testing.TB, pattern, s string) []string {
	t.Helper()
	re, err := compileRegex(pattern)
	if err != nil {
		t.Fatalf("compile %q: %v", pattern, err)
	}
	var out []string
	re.findAll(&reMachine{}, s, func(a, b int) bool { out = append(out, s[a:b]); return true })
	return out
}

const (
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// TestRegexSplits checks the declared tokenizer patterns on strings whose splits follow from the
// pattern by hand (Perl semantics: leftmost-first alternation, greedy quantifiers that give back).
func TestRegexSplits(t *testing.T) {
	for _, c := range []struct {
		pattern, in string
		want        []string
	}{
		// \s+(?!\S): a run of spaces before a word leaves its last space to the word.
		{gpt2Pattern, "Hello world's  x", []string{"Hello", " world", "'s", " ", " x"}},
		{gpt2Pattern, "a   ", []string{"a", "   "}},
		{gpt2Pattern, "x\n\ny", []string{"x", "\n", "\n", "y"}},
		// Llama 3: digits in threes; (?i) contractions; punctuation takes following newlines.
		{llama3Pattern, "12345", []string{"123", "45"}},
		{llama3Pattern, "DON'T", []string{"DON", "'T"}},
		{llama3Pattern, "it'ſ", []string{"it", "'ſ"}}, // ſ folds to s under (?i), as in Oniguruma
		{llama3Pattern, "ok!\n\nNext", []string{"ok", "!\n\n", "Next"}},
		{llama3Pattern, "a \n b", []string{"a", " \n", " b"}},
		// Unicode \s: U+0085 is White_Space, U+FEFF is not.
		{`\s+`, "a\u0085b\ufeffc", []string{"\u0085"}},
		{`\S+`, "a\u0085b\ufeffc", []string{"a", "b\ufeffc"}},
		{`\p{L}+`, "héllo wörld 東京", []string{"héllo", "wörld", "東京"}},
		{`\p{N}`, "x٣y", []string{"٣"}},
		{`[^\s\p{L}]+`, "a!? b", []string{"!?"}},
		{`a{2,3}`, "aaaaaaa", []string{"aaa", "aaa"}},
		{`a+?`, "aaa", []string{"a", "a", "a"}},
		{`(?>a+)b|a`, "aaa", []string{"a", "a", "a"}},
		{`a*+a`, "aaa", nil}, // possessive: gives nothing back
		{`x(?=y)`, "xxy", []string{"x"}},
		{`\bab\b`, "ab cab ab", []string{"ab", "ab"}},
		{`^a|b$`, "ab\nab", []string{"a", "b", "a", "b"}},
		{`\x41\u0042\x{43}`, "ABC", []string{"ABC"}},
		{`[\x{4E00}-\x{9FFF}]+`, "a漢字b", []string{"漢字"}},
		{`\p{Han}+`, "a漢字b", []string{"漢字"}},
		{`(?i)straße`, "STRASSE STRAßE", []string{"STRAßE"}}, // simple folds only
	} {
		got := findAllStrings(t, c.pattern, c.in)
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("%q on %q: got %q, want %q", c.pattern, c.in, got, c.want)
		}
	}
}

// TestRegexEmptyMatches checks find_iter's handling of empty matches (the onig crate's rule: no
// empty match right where the previous match ended).
func TestRegexEmptyMatches(t *testing.T) {
	re, err := compileRegex(`x*`)
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]int
	re.findAll(&reMachine{}, "axxb", func(a, b int) bool { got = append(got, [2]int{a, b}); return true })
	want := [][2]int{{0, 0}, {1, 3}, {4, 4}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRegexErrors(t *testing.T) {
	for _, c := range []struct{ pattern, want string }{
		{`(?<=a)b`, "lookbehind"},
		{`(a)\1`, "backreferences"},
		{`(a*)*`, "empty string"},
		{`[a-`, "missing ']'"},
		{`(ab`, "missing ')'"},
		{`ab)`, "unbalanced"},
		{`\p{Klingon}`, `unknown Unicode property "Klingon"`},
		{`a{5,2}`, "max below min"},
		{`*a`, "nothing to repeat"},
		{`\q`, `unsupported escape \q`},
		{`[[:alpha:]]`, "POSIX"},
		{`a{2000}`, "above 1000"},
	} {
		_, err := compileRegex(c.pattern)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), strconv.Quote(c.pattern)) {
			t.Errorf("%q: error %v, want one naming the pattern and containing %q", c.pattern, err, c.want)
		}
	}
}

// differentialPatterns mean the same in Go's regexp (RE2, leftmost-first like Perl) and here
// when the input is ASCII: no lookaround, no \s (ASCII in Go), no case folding beyond ASCII.
var differentialPatterns = []string{
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^ \t\n\r\f\v\p{L}\p{N}]+|[ \t\n\r\f\v]+`,
	`[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^ \t\r\n\p{L}\p{N}]+[\r\n]*|[ \t]*[\r\n]+|[ \t]+`,
	`a|ab|abc`, `(a|ab)(c|bcd)`, `x*y?z+`, `[a-f]{2,4}?`, `(?i:ab|c)+`, `\d+\.\d*|\.\d+`, `[^a-z]+`,
	`(?:ab)*c`, `a.c`, `\w+|[^\w ]+`,
}

func FuzzRegexAgainstStdlib(f *testing.F) {
	for _, s := range []string{"Hello world's 123", "abcd abc ab", "xxyzz", "3.14 .5", "AbC\n\r\t ok"} {
		f.Add(s)
	}
	res := make([]*Regex, len(differentialPatterns))
	std := make([]*regexp.Regexp, len(differentialPatterns))
	for i, p := range differentialPatterns {
		var err error
		if res[i], err = compileRegex(p); err != nil {
			f.Fatal(err)
		}
		std[i] = regexp.MustCompile(p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := 0; i < len(s); i++ {
			if s[i] >= 0x80 {
				return // ASCII only: the two engines' Unicode tables and \w differ beyond it
			}
		}
		m := &reMachine{}
		for i := range res {
			var got [][2]int
			res[i].findAll(m, s, func(a, b int) bool { got = append(got, [2]int{a, b}); return true })
			want := std[i].FindAllStringIndex(s, -1)
			ok := len(got) == len(want)
			for j := 0; ok && j < len(got); j++ {
				ok = got[j][0] == want[j][0] && got[j][1] == want[j][1]
			}
			if !ok {
				t.Errorf("%q on %q: got %v, Go's regexp %v", differentialPatterns[i], s, got, want)
			}
		}
	})
}

// TestRegexNestedRepeatsLinear is issue 25's severe case 6: `(a+)+$` takes time exponential in
// a backtracking engine on a run of a's that ends in a non-match. The search runs out of its
// step budget and solve finishes it; the whole split must take well under a second for a run
// of 100,000 a's (exponential: 32 a's took more than 30 s).
func TestRegexNestedRepeatsLinear(t *testing.T) {
	for _, c := range []struct {
		pattern string
		n       int
		tail    string
	}{
		{`(a+)+$`, 100000, "!"},
		{`(a|a)*b`, 100000, ""},
		{`(?:a+)*+x|(a+)+y`, 50000, "z"},
		{`(?=(a+)+$)a|b`, 20000, "!"},
	} {
		s := strings.Repeat("a", c.n) + c.tail
		t0 := time.Now()
		got := findAllStrings(t, c.pattern, s)
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("%q on %d a's: %v", c.pattern, c.n, d)
		}
		if len(got) != 0 {
			t.Errorf("%q: %d matches, want none", c.pattern, len(got))
		}
	}
}

// randomPattern writes a random pattern over the letters a, b, c with every construct the
// engine has: classes, alternation, greedy, lazy, possessive and counted repeats, lookahead,
// atomic groups and anchors.
func randomPattern(r *rand.Rand, depth int) string {
	atom := func() string {
		switch r.IntN(8) {
		case 0:
			return "[ab]"
		case 1:
			return "."
		case 2:
			return `\s`
		default:
			return string(rune('a' + r.IntN(3)))
		}
	}
	if depth <= 0 {
		return atom()
	}
	switch r.IntN(10) {
	case 0, 1:
		return randomPattern(r, depth-1) + randomPattern(r, depth-1)
	case 2:
		return randomPattern(r, depth-1) + "|" + randomPattern(r, depth-1)
	case 3:
		q := []string{"+", "*", "?", "+?", "*?", "++", "{1,3}", "{2}", "{0,2}?"}[r.IntN(9)]
		return "(?:" + randomPattern(r, depth-1) + ")" + q
	case 4:
		return "(?=" + randomPattern(r, depth-1) + ")"
	case 5:
		return "(?!" + randomPattern(r, depth-1) + ")"
	case 6:
		return "(?>" + randomPattern(r, depth-1) + ")"
	case 7:
		return []string{"^", "$", `\b`, `\B`}[r.IntN(4)]
	}
	return atom()
}

// TestRegexSolveMatchesBacktracking checks solve, the linear-time fallback, against the
// backtracking machine with an unbounded budget on random patterns and texts: the first match
// from every position, and findAll's matches with a budget so small that solve does the work.
func TestRegexSolveMatchesBacktracking(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tried := 0
	for tried < 3000 {
		pat := randomPattern(r, 4)
		re, err := compileRegex(pat)
		if err != nil {
			continue // a repeated item that can match the empty string, say
		}
		tried++
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "abc \n"[r.IntN(5)]
		}
		s := string(b)
		if r.IntN(4) == 0 {
			s += "é" // a rune of two bytes
		}
		d := re.solve(s, 0)
		m := &reMachine{}
		for k, p := range d.pos {
			want, _ := re.matchAt(m, 0, s, int(p), math.MaxInt)
			if int(d.end[k]) != want {
				t.Fatalf("%q on %q at %d: solve %d, backtracking %d", pat, s, p, d.end[k], want)
			}
		}
		var got, want [][2]int
		re.findAllBudget(m, s, math.MaxInt, func(a, b int) bool { want = append(want, [2]int{a, b}); return true })
		re.findAllBudget(m, s, r.IntN(8), func(a, b int) bool { got = append(got, [2]int{a, b}); return true })
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q on %q: findAll with solve %v, backtracking %v", pat, s, got, want)
		}
	}
}

// TestRegexBounds is issue 25's severe case 7: a pattern too long, too deeply nested or too big
// once compiled is refused at once, with a message that names it briefly.
func TestRegexBounds(t *testing.T) {
	var alts []string
	for i := range 4499 {
		alts = append(alts, fmt.Sprintf("word%dx", i))
	}
	for _, c := range []struct{ pattern, want string }{
		{strings.Join(alts, "|"), "more than 16384 instructions"},
		{strings.Repeat(strings.Join(alts, "|"), 3), "longer than a pattern may be"},
		{strings.Repeat("(", 300) + "a" + strings.Repeat(")", 300), "nested more than"},
		{`((a{1000}){1000}){1000}`, "more than 16384 instructions"},
		{strings.Repeat("(?=a)", 70), "more than 64 lookaheads"},
	} {
		t0 := time.Now()
		_, err := compileRegex(c.pattern)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: error %v, want %q", c.pattern, err, c.want)
		} else if len(err.Error()) > 400 {
			t.Errorf("%.40q: a message of %d bytes", c.pattern, len(err.Error()))
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("%.40q: refused after %v", c.pattern, d)
		}
	}
}
