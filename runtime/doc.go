// Package runtime executes compute work on a Vulkan device: it is what programs embed to run
// compiled plans, and what the tuner uses to measure kernels.
//
// # Pieces
//
//   - Loader: libvulkan.so.1 is opened at run time (dlopen), so a binary starts on machines
//     without Vulkan and reports ErrNoVulkan, naming what to install.
//   - Devices: Devices lists every physical device with its Caps (subgroups, f16, 16-bit storage,
//     integer dot product, push descriptors, cooperative-matrix shapes, VK_NV_cooperative_matrix2,
//     timestamps, limits, memory heaps and budgets) and Fingerprint; Open picks discrete >
//     integrated > virtual > CPU, or the device VKC_DEVICE names by index or name substring.
//     Open enables VK_NV_cooperative_matrix2 where the device has it, unless VKC_COOPMAT2=off.
//   - Memory: NewBuffer sub-allocates device memory from large blocks; on devices whose device
//     memory is host-visible (integrated GPUs, lavapipe) buffers are mapped and Run copies inputs
//     and outputs directly (zero-copy), elsewhere through staging recorded in the program.
//   - Pipelines: NewPipeline builds a compute pipeline from SPIR-V with specialization and push
//     constants, through a VkPipelineCache saved under os.UserCacheDir()/vkc, keyed by the
//     fingerprint.
//   - Programs: NewProgram takes a dispatch list, finds the hazards between dispatches on
//     overlapping byte ranges (Analyze, pure Go), moves independent dispatches into shared barrier
//     intervals and records everything once into a reusable command buffer. Run = write inputs,
//     submit, wait, read outputs: no allocation, no recording.
//   - Timing: Program.Measure (for the tuner: warm-up, many repetitions in one submission,
//     median and spread, noise detection, cancellable) and Program.Profile (per-dispatch GPU
//     time by timestamp queries).
//   - Failures are typed: ErrNoVulkan, ErrNoDevice, ErrDeviceLost, ErrOutOfDeviceMemory,
//     ErrTimeout, ErrLimit (test with errors.Is). Device.Close destroys everything still open.
//
// # Example
//
//	d, err := runtime.Open(runtime.Options{})
//	if err != nil { ... }                         // errors.Is(err, runtime.ErrNoVulkan) ...
//	defer d.Close()
//	add, _ := d.NewPipeline(runtime.Kernel{Name: "add", SPIRV: addSPV, Bindings: 3, PushConstantSize: 4,
//		Spec: []runtime.SpecConstant{{ID: 0, Value: 64}}})          // workgroup size 64
//	scale, _ := d.NewPipeline(runtime.Kernel{Name: "scale", SPIRV: scaleSPV, Bindings: 1, PushConstantSize: 8})
//	a, _ := d.NewBuffer(4 * n)
//	b, _ := d.NewBuffer(4 * n)
//	c, _ := d.NewBuffer(4 * n)
//	p, err := d.NewProgram(runtime.ProgramSpec{
//		Dispatches: []runtime.Dispatch{
//			{Pipeline: add, Grid: [3]uint32{n / 64, 1, 1}, Push: u32(n), Bindings: []runtime.Binding{
//				{Buffer: a, Access: runtime.Read}, {Buffer: b, Access: runtime.Read}, {Buffer: c, Access: runtime.Write}}},
//			{Pipeline: scale, Grid: [3]uint32{n / 64, 1, 1}, Push: push(n, 2.0), Bindings: []runtime.Binding{
//				{Buffer: c, Access: runtime.ReadWrite}}},
//		},
//		Inputs:  []runtime.Region{{Buffer: a, Size: 4 * n}, {Buffer: b, Size: 4 * n}},
//		Outputs: []runtime.Region{{Buffer: c, Size: 4 * n}},
//	})
//	fmt.Println(p.Stats())                        // {Dispatches:2 Barriers:1 Intervals:2 Copies:0}
//	out := make([]byte, 4*n)
//	err = p.Run(ctx, [][]byte{aBytes, bBytes}, [][]byte{out})
//	m, err := p.Measure(ctx, runtime.MeasureOptions{Warmup: 2, Reps: 20})
//	fmt.Println(m.Median, m.Spread, m.Noisy)
//
// # Limits
//
// One compute queue per Device; a Program is not for concurrent use (Device methods are).
// Push constants are recorded into the command buffer, so changing a run-time scalar with SetPush
// re-records it before the next Run (about 0.3 µs per dispatch on lavapipe's recorder). Handles
// are passed to C as pointers, which assumes a 64-bit platform. The validation messenger is for
// tests and diagnosis (Options.Validation); it slows every call.
package runtime
