package kernels

// SetCoopDQScratch sets the bound of matmul_coop_dq's copy of B (coopDQScratch) for a test, so
// that a small problem is copied in parts; the returned function restores it.
func SetCoopDQScratch(n int) (restore func()) {
	old := coopDQScratch
	coopDQScratch = n
	return func() { coopDQScratch = old }
}
