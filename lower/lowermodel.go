package lower

import (
	"errors"

	"vkc/ir"
	"vkc/plan"
)

func lowerModel(m *ir.Model, fns []*ir.Function, opts Options) (*plan.Plan, *Report, error) {
	return nil, nil, errors.New("lower: not implemented yet")
}
