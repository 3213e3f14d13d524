package tune

import (
	"cmp"
	"slices"
	"time"

	"github.com/vkc-project/vkc/kernels"
)

// StaticKey identifies a problem's static choice: the problem on one device and driver, by one
// compiler, under one compile policy (what Caps the compile adds to the device's, such as
// 8-bit activations).
type StaticKey struct {
	Device   string `json:"device"`
	Driver   string `json:"driver"`
	Compiler string `json:"compiler"`
	Policy   string `json:"policy,omitempty"`
	Problem  string `json:"problem"`
}

// StaticEntry is a problem's static choice: the template and configuration lowering takes
// without measuring, with the roofline estimate of that launch and a floor no kernel of the
// problem beats. It is a function of the problem, the device's capabilities and the compiler
// alone, so the database keeps it and a warm compile reads it instead of building every
// accepting template's kernel again to rank its problems.
type StaticEntry struct {
	StaticKey
	Template string         `json:"template"`
	Config   kernels.Config `json:"config,omitempty"`
	Estimate time.Duration  `json:"estimate_ns"`
	Floor    time.Duration  `json:"floor_ns"`
}

// GetStatic returns the static choice recorded for k.
func (db *DB) GetStatic(k StaticKey) (*StaticEntry, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	e, ok := db.statics[k]
	if !ok {
		return nil, false
	}
	c := *e
	c.Config = cloneConfig(e.Config)
	return &c, true
}

// PutStatic records a static choice; Save writes it.
func (db *DB) PutStatic(e *StaticEntry) {
	db.mu.Lock()
	defer db.mu.Unlock()
	c := *e
	c.Config = cloneConfig(e.Config)
	db.statics[e.StaticKey] = &c
}

func sortStatics(es []*StaticEntry) {
	slices.SortFunc(es, func(x, y *StaticEntry) int {
		a, b := x.StaticKey, y.StaticKey
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Driver, b.Driver), cmp.Compare(a.Compiler, b.Compiler),
			cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Problem, b.Problem))
	})
}
