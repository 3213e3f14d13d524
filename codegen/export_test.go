package codegen

// BuildTensorGemm is buildTensorGemm for the device tests (package codegen_test).
var BuildTensorGemm = buildTensorGemm
