// Package vkc is the compiler API of vkc, a graph compiler for neural-network inference on
// Vulkan. Programs that only run compiled plans import package engine instead, which links
// none of the compiler.
//
// Compile turns a parsed model (ir.ParseModel) into a plan for one device: it selects the
// functions, optimises them (e-graph saturation and extraction, rules.Optimize), lowers them to
// kernel schedules with the device's capabilities (lower.Lower), and reports what each phase did
// and how long it took. With Options.Tune the kernels are tuned and the graphs selected by
// measurement on the device instead (lower/tune). The plan is written with plan.WriteFile
// (atomically) and run with engine.Load:
//
//	m, err := ir.ParseModel("examples/tinyllama/model.yaml")
//	p, rep, err := vkc.Compile(ctx, m, vkc.Options{})
//	err = p.WriteFile("tinyllama.plan")
//	e, err := engine.Load("tinyllama.plan", engine.Options{})
//	g, err := e.GenerateIDs(ctx, []int32{1, 2, 3}, engine.GenerateOptions{MaxTokens: 16}, nil)
//
// The tensor helpers here (TensorBytes, Inputs, Outputs, ValueTensor, ValueType) convert between
// ir.Tensor, which the interpreter and the weight files use, and the plan layout of a run's byte
// maps, for programs that have both the compiler and the engine.
package vkc
