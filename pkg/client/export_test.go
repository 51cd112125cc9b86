package client

// SetPPTestHook sets a hook that runs after a PP log switch reset the other
// log and before the record is written there (an error fails the append);
// the returned func restores the previous hook.
func SetPPTestHook(f func(group uint32, row, covered uint64) error) func() {
	old := ppTestHook
	ppTestHook = f
	return func() { ppTestHook = old }
}
