// Package tune is vkc's generic kernel tuner, its database, and the measured selection of whole
// programs (DESIGN.md, "Choosing the graph after tuning, not before").
//
// One Tuner searches any kernel template's declared space (kernels.Space) without knowing which
// op the template serves: small spaces in full, large ones by a seeded budgeted search (random
// samples, then hill climbing over neighbouring parameter values). Each configuration is built,
// run on the device on random inputs of the problem's real shape (integer operands get valid
// values, see Inputs), compared with the reference interpreter, and only then timed through a
// TimingSource (DeviceTiming: runtime.Program.Measure; tests use a fake clock). A configuration
// that fails to build, to create its pipeline, or to compute the right result is recorded as
// invalid and never chosen. Pipelines are created once per distinct module and specialization
// (Pipelines), and configurations that realise the same launch share one measurement.
//
// Results go into a DB keyed by device fingerprint, driver, compiler version, template and
// problem key, written atomically; a recompile reuses completed searches, resumes interrupted
// ones, and says how many it reused (Tuner.Summary).
//
// # Wiring
//
// The compile pipeline (the root package's pipeline.go, measureSource in cost.go) calls, in
// order: OpenDB; a Tuner with lower.StaticChoice as its Static baseline; TunePlan on the
// e-graph's problems ranked by their share of their function's estimated time (Ranked), then
// on the candidates' kernels; extraction priced by Known; SelectFunctions with the database and
// a key per function (SelectOptions.DB, Key), which takes a recorded selection instead of
// measuring; Choose with an ended context for the final lowering; Record for the plan; DB.Save.
//
// When the context ends (budget spent or Ctrl-C), the tuner stops measuring at once: a problem
// keeps the best configuration measured so far, or gets the Static choice when none was; Choose
// does not fail because of the context, so the caller decides from ctx.Err() whether to write a
// plan.
package tune
