package egraph

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// StopReason says why a Runner stopped.
type StopReason int

const (
	// Saturated: an iteration changed nothing and no rule was banned; the graph holds every
	// equality the rules can derive.
	Saturated StopReason = iota + 1
	IterationLimit
	NodeLimit
	TimeLimit
	// Error: a rule failed (for example an analysis merge conflict); Run returns the error.
	Error
	// Cancelled: the context was cancelled; Run returns the context's error.
	Cancelled
)

// String names the reason as the report prints it.
//
// Example:
//
//	fmt.Println(egraph.NodeLimit) // node limit
func (r StopReason) String() string {
	switch r {
	case Saturated:
		return "saturated"
	case IterationLimit:
		return "iteration limit"
	case NodeLimit:
		return "node limit"
	case TimeLimit:
		return "time limit"
	case Error:
		return "error"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// Backoff is egg's back-off scheduler: a rule whose search finds more than MatchLimit << bans
// matches in one iteration is banned for BanLength << bans iterations (its matches are dropped),
// and bans counts up. This keeps explosive rules (associativity, commutativity) from drowning the
// others while still letting them run now and then.
type Backoff struct {
	MatchLimit int
	BanLength  int
}

// DefaultBackoff is egg's default: 1000 matches, banned for 5 iterations.
var DefaultBackoff = Backoff{MatchLimit: 1000, BanLength: 5}

// Runner runs equality saturation. Zero limits mean "no limit"; NewRunner sets egg's defaults.
type Runner struct {
	IterLimit int
	NodeLimit int
	TimeLimit time.Duration
	// Scheduler is the back-off configuration; nil runs every rule on every match every iteration.
	Scheduler *Backoff
}

// NewRunner returns a runner with egg's defaults: 30 iterations, 10000 nodes, 5 s, back-off.
//
// Example:
//
//	r := egraph.NewRunner()
//	r.NodeLimit = 100_000
//	rep, err := r.Run(ctx, g, rules)
func NewRunner() *Runner {
	b := DefaultBackoff
	return &Runner{IterLimit: 30, NodeLimit: 10_000, TimeLimit: 5 * time.Second, Scheduler: &b}
}

// RuleStat is one rule's statistics in one iteration.
type RuleStat struct {
	Name    string
	Matches int  // matches found (after guards); 0 when banned
	Applied int  // matches that changed the graph
	Banned  bool // skipped this iteration, or banned by this iteration's search
}

// Iteration is the record of one iteration.
type Iteration struct {
	Nodes, Classes         int // after the rebuild
	Search, Apply, Rebuild time.Duration
	CongruenceUnions       int
	Rules                  []RuleStat // in rule order
	Changed                bool
}

// Report says why the runner stopped and what each iteration did.
type Report struct {
	Stop       StopReason
	Err        error // the error for Stop == Error or Cancelled
	Iterations []Iteration
	Total      time.Duration
	Nodes      int
	Classes    int
}

// String summarises the report: the stop reason and totals, then one line per iteration with
// sizes, phase times and the rules that matched.
//
// Example:
//
//	log.Printf("saturation:\n%s", rep)
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stop: %s after %d iterations, %v; %d nodes, %d classes\n", r.Stop, len(r.Iterations), r.Total.Round(time.Microsecond), r.Nodes, r.Classes)
	for i, it := range r.Iterations {
		fmt.Fprintf(&b, "  iter %d: %d nodes %d classes; search %v apply %v rebuild %v;", i, it.Nodes, it.Classes,
			it.Search.Round(time.Microsecond), it.Apply.Round(time.Microsecond), it.Rebuild.Round(time.Microsecond))
		for _, s := range it.Rules {
			if s.Matches > 0 || s.Banned {
				fmt.Fprintf(&b, " %s=%d", s.Name, s.Matches)
				if s.Banned {
					b.WriteString("(banned)")
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// RuleMatches returns the total matches per rule over all iterations, in rule order.
//
// Example:
//
//	for _, s := range rep.RuleMatches() { fmt.Println(s.Name, s.Matches, s.Applied) }
func (r *Report) RuleMatches() []RuleStat {
	var out []RuleStat
	idx := map[string]int{}
	for _, it := range r.Iterations {
		for _, s := range it.Rules {
			i, ok := idx[s.Name]
			if !ok {
				i = len(out)
				idx[s.Name] = i
				out = append(out, RuleStat{Name: s.Name})
			}
			out[i].Matches += s.Matches
			out[i].Applied += s.Applied
			out[i].Banned = out[i].Banned || s.Banned
		}
	}
	return out
}

type ruleSched struct {
	bans        int
	bannedUntil int
}

// Run saturates g with rules until a stop condition and reports why it stopped. Each iteration
// searches every (unbanned) rule on the rebuilt graph, then applies all matches, then rebuilds
// once (egg's deferred rebuild). Limits are checked between rules, so a limit may be exceeded by
// one rule's applications. An error from a rule (an analysis merge conflict names both values and
// the rule) or a cancelled ctx stops the run; the error is returned and also kept in the report.
//
// Example:
//
//	rep, err := egraph.NewRunner().Run(ctx, g, rules)
//	if err != nil { return err }
//	log.Printf("%s", rep)
func (r *Runner) Run(ctx context.Context, g *EGraph, rules []*Rewrite) (*Report, error) {
	start := time.Now()
	rep := &Report{}
	sched := make([]ruleSched, len(rules))
	finish := func(reason StopReason, err error) (*Report, error) {
		rep.Stop, rep.Err = reason, err
		rep.Total = time.Since(start)
		rep.Nodes, rep.Classes = g.NumNodes(), g.NumClasses()
		return rep, err
	}
	if _, err := g.Rebuild(); err != nil {
		return finish(Error, err)
	}
	overLimit := func() (StopReason, bool) {
		if ctx.Err() != nil {
			return Cancelled, true
		}
		if r.TimeLimit > 0 && time.Since(start) > r.TimeLimit {
			return TimeLimit, true
		}
		if r.NodeLimit > 0 && g.NumNodes() > r.NodeLimit {
			return NodeLimit, true
		}
		return 0, false
	}
	stop := func(reason StopReason) (*Report, error) {
		var err error
		if reason == Cancelled {
			err = ctx.Err()
		}
		return finish(reason, err)
	}
	for iter := 0; ; iter++ {
		if reason, over := overLimit(); over {
			return stop(reason)
		}
		if r.IterLimit > 0 && iter >= r.IterLimit {
			return finish(IterationLimit, nil)
		}
		it := Iteration{Rules: make([]RuleStat, len(rules))}
		version := g.Version()
		anyBanned := false

		t0 := time.Now()
		matches := make([][]Match, len(rules))
		for i, rw := range rules {
			it.Rules[i].Name = rw.Name
			if iter < sched[i].bannedUntil {
				it.Rules[i].Banned, anyBanned = true, true
				continue
			}
			limit := 0
			if r.Scheduler != nil {
				limit = r.Scheduler.MatchLimit << sched[i].bans
			}
			ms := rw.Searcher.Search(g, limitPlusOne(limit))
			if limit > 0 && len(ms) > limit {
				sched[i].bannedUntil = iter + 1 + r.Scheduler.BanLength<<sched[i].bans
				sched[i].bans++
				it.Rules[i].Banned, anyBanned = true, true
				continue
			}
			ms = rw.filter(g, ms)
			matches[i] = ms
			it.Rules[i].Matches = len(ms)
			if reason, over := overLimit(); over {
				it.Search = time.Since(t0)
				rep.Iterations = append(rep.Iterations, it)
				return stop(reason)
			}
		}
		it.Search = time.Since(t0)

		t1 := time.Now()
		for i, rw := range rules {
			if len(matches[i]) == 0 {
				continue
			}
			n, err := rw.Apply(g, matches[i])
			it.Rules[i].Applied = n
			if err != nil {
				it.Apply = time.Since(t1)
				rep.Iterations = append(rep.Iterations, it)
				return finish(Error, err)
			}
			if reason, over := overLimit(); over {
				it.Apply = time.Since(t1)
				// Leave the graph consistent for extraction even when stopping early.
				if _, err := g.Rebuild(); err != nil {
					rep.Iterations = append(rep.Iterations, it)
					return finish(Error, err)
				}
				it.Nodes, it.Classes, it.Changed = g.NumNodes(), g.NumClasses(), g.Version() != version
				rep.Iterations = append(rep.Iterations, it)
				return stop(reason)
			}
		}
		it.Apply = time.Since(t1)

		t2 := time.Now()
		unions, err := g.Rebuild()
		it.Rebuild = time.Since(t2)
		it.CongruenceUnions = unions
		it.Nodes, it.Classes = g.NumNodes(), g.NumClasses()
		it.Changed = g.Version() != version
		rep.Iterations = append(rep.Iterations, it)
		if err != nil {
			return finish(Error, err)
		}
		if !it.Changed {
			if !anyBanned {
				return finish(Saturated, nil)
			}
			// Nothing changed but some rules sat out: let them run now rather than wait out
			// their bans (egg's "fast-forward"), so saturation is only claimed when all ran.
			for i := range sched {
				sched[i].bannedUntil = 0
			}
		}
	}
}

func limitPlusOne(limit int) int {
	if limit <= 0 {
		return 0
	}
	return limit + 1
}

func (r *Rewrite) filter(g *EGraph, ms []Match) []Match {
	if len(r.Guards) == 0 {
		return ms
	}
	kept := ms[:0]
	for _, m := range ms {
		ok := true
		for _, guard := range r.Guards {
			if !guard(g, m) {
				ok = false
				break
			}
		}
		if ok {
			kept = append(kept, m)
		}
	}
	return kept
}
