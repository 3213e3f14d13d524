package vkc

import "github.com/vkc-project/vkc/kernels"

// Int8Mode is Options.Int8: whether products with block-quantized weights may quantize their
// activations to 8 bits (kernels.Int8Mode, here so that a program sets it through the compiler's
// API alone).
type Int8Mode = kernels.Int8Mode

// The Int8 modes: exact f32 products (the default), both kernels offered and measured, the
// integer-dot kernel wherever it applies.
const (
	Int8Off  = kernels.Int8Off
	Int8Auto = kernels.Int8Auto
	Int8On   = kernels.Int8Only
)

// ParseInt8Mode reads "off", "auto" or "on" (vkc compile --int8).
func ParseInt8Mode(s string) (Int8Mode, error) { return kernels.ParseInt8Mode(s) }
