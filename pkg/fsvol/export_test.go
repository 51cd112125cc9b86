package fsvol

// SetCompactHook makes every compaction submitted from now on run f when it
// ended on the nodes, before it counts as done (tests hold compactions
// pending with it).
func SetCompactHook(v *Volume, f func()) {
	v.mu.Lock()
	v.compactHook = f
	v.mu.Unlock()
}
