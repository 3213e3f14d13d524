// Package vkc is the compiler driver and the embedding API of vkc, a graph compiler for
// neural-network inference on Vulkan.
//
// Compile turns a parsed model (ir.ParseModel) into a plan for one device: it selects the
// functions, optimises them (e-graph saturation and extraction, rules.Optimize), lowers them to
// kernel schedules with the device's capabilities (lower.Lower), and reports what each phase did
// and how long it took. With Options.Tune the kernels are tuned and the graphs selected by
// measurement on the device instead (lower/tune). The plan is written with plan.WriteFile
// (atomically).
//
// Load opens a plan file on a device; the tensor helpers (TensorBytes, Inputs, Outputs,
// Int32Bytes, Float32s …) convert between host values and the byte maps of Run, and Generate runs
// a greedy decode loop over a language model's prefill and decode functions:
//
//	l, err := vkc.Load("tinyllama.plan", vkc.LoadOptions{})
//	defer l.Close()
//	g, err := vkc.Generate(ctx, l, []int32{1, 2, 3}, 16)
//	fmt.Println(g.Tokens, g.PerToken())
package vkc
