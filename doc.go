// Package vkc is the compiler driver and the embedding API of vkc, a graph compiler for
// neural-network inference on Vulkan.
//
// Compile turns a parsed model (ir.ParseModel) into a plan for one device: it selects the
// functions, optimises them (e-graph saturation and extraction, see the hook in compile.go),
// lowers them to kernel schedules with the device's capabilities, and reports what each phase
// did and how long it took. The plan is written with plan.WriteFile (atomically) and run by the
// runtime package; LoadPlan, the tensor helpers (TensorBytes, Inputs, Outputs, Float32s …) and
// Generate make the common host-side work short:
//
//	p, err := vkc.LoadPlan("tinyllama.plan")
//	dev, err := runtime.Open(runtime.Options{})
//	exe, err := dev.Load(p, runtime.LoadOptions{})
//	g, err := vkc.Generate(ctx, exe, []int32{1, 2, 3}, 16)
//	fmt.Println(g.Tokens, g.PerToken())
package vkc
