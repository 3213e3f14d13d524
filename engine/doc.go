// Package engine runs compiled vkc plans: it is what a Go program embeds to load a plan file,
// open a Vulkan device, run the plan's functions, keep its state (the KV caches) on the device,
// generate tokens greedily and profile, without linking the compiler.
//
//	m, err := engine.Load("tinyllama.plan", engine.Options{})
//	if err != nil { ... } // "tinyllama.plan: plan was compiled for ...", "no Vulkan loader ..."
//	defer m.Close()
//	res, err := m.Call(ctx, "decode", map[string]any{"tokens": []int32{42}, "pos": 0})
//	logits, err := res.Float32s("logits")
//	g, err := m.Generate(ctx, []int32{37, 235, 140, 72}, 8) // prefill + decode loop, greedy
//	fmt.Println(g.Tokens, g.PerToken())
//
// # Inputs and outputs
//
// Model.Call takes Go values ([]float32, []int32, []uint16 as f16 or bf16 bits, numbers, or
// WithShape for an exact shape check) and returns Results with typed accessors (Float32s widens
// f16 and bf16 outputs). Executable.Run, which Model embeds, takes and returns byte slices in the
// plan's layout (Encode, Decode, Int32Bytes, Float32s convert); it allocates less and suits
// loops that reuse buffers (RunInto allocates nothing).
//
// # What it links
//
// engine imports only the plan format (package plan), the Vulkan runtime (package runtime, cgo
// and github.com/goki/vulkan) and x448/float16. It does not import the compiler (egraph, rules,
// kernels, codegen, lower), the reference interpreter, nor package ir: ir is the compiler's op
// set with its model.yaml parser and shape inference, and would add gopkg.in/yaml.v3 and every
// op's code to a program that only runs plans. So tensors here are plan-layout bytes with a
// plan.DType and shape (Tensor), not ir.Tensor; the compiler package vkc converts between the
// two (vkc.Inputs, vkc.Outputs) for programs that have both. TestDependencies keeps it so.
//
// # Limits
//
// A function runs for its compiled shapes, or, when it has a run-time length (a prompt of 1..512
// tokens), for k·n rows of its bounded inputs and outputs (Inputs and Results handle both).
// Generate is greedy (argmax) only: a prefill of run-time length takes the prompt in one run when
// it fits (in chunks of its capacity when not), a static prefill takes full chunks and decode the
// rest. A Model runs one function at a time.
package engine
