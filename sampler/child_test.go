package sampler

// runChild runs the test binary's child modes (started by the permission
// tests as another user); it reports whether it ran one.
func runChild() bool { return false }
