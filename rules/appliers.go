package rules

import (
	"vkc/egraph"
)

// appliers returns the Go right-hand sides for rules over the op IR.
func (a *adapter) appliers() map[string]egraph.Applier {
	return map[string]egraph.Applier{}
}
