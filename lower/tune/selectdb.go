package tune

import (
	"cmp"
	"slices"
	"time"
)

// SelectionKey identifies one measured selection in the database: a function, by the key of its
// graph as written (rules.FunctionKey: ops, attributes, types, structure), measured on one
// device and driver by one compiler. A changed graph, device, driver or compiler is a miss.
type SelectionKey struct {
	Device   string `json:"device"`
	Driver   string `json:"driver"`
	Compiler string `json:"compiler"`
	Function string `json:"function"` // the function's name, for listing (the graph key decides)
	Graph    string `json:"graph"`
}

// SelectionEntry is a selection's outcome: every candidate's structure (the key of its graph)
// and its paired measurements, and the winner. A compile whose candidates for the function are
// exactly the recorded ones takes the recorded winner without measuring (a warm compile); any
// other set of candidates is measured again and replaces the entry.
type SelectionEntry struct {
	SelectionKey
	Candidates []SelectionRecord `json:"candidates"`
	Winner     int               `json:"winner"` // index into Candidates
	Rounds     int               `json:"rounds"`
	// Short is the run-time length at which the rounds also timed the candidates, beside the
	// capacity Capacity of the length named Dim (Selection.Short; 0: none).
	Short    int    `json:"short,omitempty"`
	Dim      string `json:"dim,omitempty"`
	Capacity int    `json:"capacity,omitempty"`
	// Complete is false when the budget ended the rounds early (or none ran): a later compile
	// measures the selection again, unless its budget is no larger than Budget, the budget of
	// the compile whose deadline cut this one short (SelectOptions.Budget; 0: cancelled, or no
	// budget): that compile takes the recorded winner as it stands.
	Complete bool          `json:"complete"`
	Budget   time.Duration `json:"budget_ns,omitempty"`
	Why      string        `json:"why,omitempty"` // how the winner was decided when not by time alone
	// Small lists the kernel problems of the candidates that the compile left at the static
	// choice as too small to move the function (Noise): a warm compile that takes this record
	// lowers none of the candidates to rank their kernels again, and leaves these so.
	Small   []string  `json:"small,omitempty"`
	Updated time.Time `json:"updated"`
}

// Reusable reports whether a compile of the given budget (0: none) takes e's winner without
// measuring: e is complete, or a compile of at least that budget was cut short making it.
func (e *SelectionEntry) Reusable(budget time.Duration) bool {
	return e.Complete || budget > 0 && e.Budget >= budget
}

// SelectionRecord is one candidate of a recorded selection.
type SelectionRecord struct {
	Graph     string          `json:"graph"` // rules.FunctionKey of the candidate
	Label     string          `json:"label"`
	Valid     bool            `json:"valid"`
	Reason    string          `json:"reason,omitempty"`
	Estimated time.Duration   `json:"estimated_ns,omitempty"`
	Median    time.Duration   `json:"median_ns,omitempty"`
	Ratio     float64         `json:"ratio,omitempty"`
	Times     []time.Duration `json:"times_ns,omitempty"` // per paired round (at the capacity)
	// At the entry's Short length: the median, ratio to the winner and per-round times.
	ShortMedian time.Duration   `json:"short_median_ns,omitempty"`
	ShortRatio  float64         `json:"short_ratio,omitempty"`
	ShortTimes  []time.Duration `json:"short_times_ns,omitempty"`
	Weights     uint64          `json:"weight_bytes,omitempty"`
}

func (e *SelectionEntry) clone() *SelectionEntry {
	c := *e
	c.Small = append([]string(nil), e.Small...)
	c.Candidates = make([]SelectionRecord, len(e.Candidates))
	for i, r := range e.Candidates {
		r.Times = append([]time.Duration(nil), r.Times...)
		r.ShortTimes = append([]time.Duration(nil), r.ShortTimes...)
		c.Candidates[i] = r
	}
	return &c
}

// GetSelection returns a copy of the selection recorded for k.
func (db *DB) GetSelection(k SelectionKey) (*SelectionEntry, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	e, ok := db.selections[k]
	if !ok {
		return nil, false
	}
	return e.clone(), true
}

// PutSelection stores a copy of e (replacing the entry of its key). Save writes it.
func (db *DB) PutSelection(e *SelectionEntry) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.selections[e.SelectionKey] = e.clone()
}

// Selections returns copies of all recorded selections, sorted by device, compiler, function
// name and graph.
func (db *DB) Selections() []*SelectionEntry {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]*SelectionEntry, 0, len(db.selections))
	for _, e := range db.selections {
		out = append(out, e.clone())
	}
	sortSelections(out)
	return out
}

func sortSelections(es []*SelectionEntry) {
	slices.SortFunc(es, func(x, y *SelectionEntry) int {
		a, b := x.SelectionKey, y.SelectionKey
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Compiler, b.Compiler),
			cmp.Compare(a.Function, b.Function), cmp.Compare(a.Graph, b.Graph))
	})
}

// SetWinner changes the winner of a selection (and of its record in db, when there is one
// under key) to candidate w, restating every ratio against it; why says what decided. The
// compile uses it when the measured winner is not worth the weight memory it adds.
func (s *Selection) SetWinner(w int, why string, db *DB, key SelectionKey) {
	if w < 0 || w >= len(s.Results) || w == s.Winner {
		return
	}
	base, short := s.Results[w].Ratio, s.Results[w].ShortRatio
	for i := range s.Results {
		if base > 0 && s.Results[i].Ratio > 0 {
			s.Results[i].Ratio /= base
		}
		if short > 0 && s.Results[i].ShortRatio > 0 {
			s.Results[i].ShortRatio /= short
		}
	}
	s.Winner, s.Why = w, why
	if db == nil {
		return
	}
	e, ok := db.GetSelection(key)
	if !ok || len(e.Candidates) != len(s.Results) {
		return
	}
	for i, r := range s.Results {
		if e.Candidates[i].Graph != r.Key {
			return
		}
		e.Candidates[i].Ratio, e.Candidates[i].ShortRatio = r.Ratio, r.ShortRatio
	}
	e.Winner, e.Why = w, why
	db.PutSelection(e)
}
