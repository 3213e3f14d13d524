// Package engine runs compiled vkc plans: it is what a Go program embeds to load a plan file,
// open a Vulkan device, run the plan's functions, keep its state (the KV caches) on the device,
// generate tokens or text (greedy or sampled, streamed) and profile, without linking the
// compiler.
//
//	m, err := engine.Load("tinyllama.plan", engine.Options{})
//	if err != nil { ... } // "tinyllama.plan: plan was compiled for ...", "no Vulkan loader ..."
//	defer m.Close()
//	res, err := m.Call(ctx, "decode", map[string]any{"tokens": []int32{42}, "pos": 0})
//	logits, err := res.Float32s("logits")
//	g, err := m.GenerateIDs(ctx, []int32{37, 235, 140, 72}, engine.GenerateOptions{MaxTokens: 8}, nil) // greedy
//	g, err = m.Generate(ctx, "Once upon a time", engine.GenerateOptions{MaxTokens: 64,
//		Sampling: engine.Sampling{Temperature: 0.8, TopK: 40, Seed: 1}}, func(s string) error { fmt.Print(s); return nil })
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
// # Generation
//
// GenerateIDs takes and gives token ids; Generate (Model.Generate, GenerateText) takes a prompt
// string, encodes it with the plan's tokenizer (optionally in its chat template) and streams the
// text as it is produced, stopping at the end token, a stop string, MaxTokens or a full context.
// Both share one loop and GenerateOptions. Sampling says what runs where: the device ranks the
// logits (the plan's top_ids/top_logits outputs, vkc compile --top-k) and takes the greedy argmax
// (next_token); the host applies the repetition penalty, temperature, top-p, min-p and the seeded
// draw over the candidates read back, or over a whole logits row when the candidates cannot
// decide a step exactly.
//
// # Sessions and concurrency
//
// A Model is safe for use from many goroutines: every generation, and every run through Model's
// methods, holds the model's generation lock for its whole length, so concurrent generations
// take turns and each gets the tokens it would get alone. A Session is one conversation on a
// Model (NewSession; any number per Model): its GenerateIDs, Generate and Chat (a list of
// messages in, the next message out, streamed) continue from the KV cache when the prompt
// extends what the cache holds, so a chat turn runs only its new tokens (Generation.Reused).
//
//	s := m.NewSession()
//	g, err := s.Chat(ctx, []engine.Message{{Role: "user", Content: "Hi"}}, engine.GenerateOptions{MaxTokens: 64}, emit)
//
// A plan compiled with slots (vkc compile --parallel N: KV caches for N sequences and a batched
// step function) runs concurrent generations together instead: a scheduler admits each into a
// free slot (the one whose cache shares the longest prefix with its prompt), runs prompts in
// chunks of Options.PrefillChunk tokens between batched decode steps that advance every running
// generation by one token, and frees the slot at the end; Activity reports the slots, the queue
// and the batches. A greedy generation gives the same tokens alone or batched.
//
// # What it links
//
// engine imports only the plan format (package plan), the Vulkan runtime (package runtime, cgo
// and github.com/goki/vulkan), x448/float16 and the tokenizer (package tokenizer, with the GGUF
// reader ir/gguf it reads vocabularies with). It does not import the compiler (egraph, rules,
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
// Generation takes a prefill of run-time length in one run when the prompt fits (in chunks of
// its capacity when not); a static prefill takes full chunks and decode the rest. A Model runs
// one function at a time.
package engine
