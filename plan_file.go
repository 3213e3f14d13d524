package vkc

import (
	"fmt"

	"github.com/vkc-project/vkc/plan"
)

// LoadPlan reads the plan file at path and makes it self-contained: when its weights are
// external (compiled with Weights: External), the weight file it names is read (relative to the
// plan's folder), checked against the size and SHA-256 the plan recorded, and its tensors are
// assembled into the plan's weight region, so the runtime needs nothing else. Errors name the
// file and what is wrong with it (not a plan, truncated, corrupt, a newer format, a changed
// weight file).
func LoadPlan(path string) (*plan.Plan, error) {
	p, err := plan.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if p.Weights.Source != nil {
		data, err := p.LoadWeights(path)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", path, err)
		}
		p.Weights.Data, p.Weights.Source = data, nil
		for i := range p.Weights.Tensors {
			p.Weights.Tensors[i].SourceOffset = 0
		}
	}
	return p, nil
}
