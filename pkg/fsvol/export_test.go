package fsvol

import "github.com/zonefleet/zonefleet/pkg/lfs"

// SetCompactHook makes every compaction submitted from now on run f when it
// ended on the nodes, before it counts as done (tests hold compactions
// pending with it).
func SetCompactHook(v *Volume, f func()) {
	v.mu.Lock()
	v.compactHook = f
	v.mu.Unlock()
}

// SetFlushHook makes every Flush round run f first; FlushRounds counts the
// rounds and FlushCalls the Flush calls.
func SetFlushHook(v *Volume, f func()) {
	v.fl.mu.Lock()
	v.fl.hook = f
	v.fl.mu.Unlock()
}

func FlushRounds(v *Volume) (rounds, calls uint64) {
	v.fl.mu.Lock()
	defer v.fl.mu.Unlock()
	return v.fl.rounds, v.fl.asked
}

// FreezeRenewals stops v's lease renewals without releasing the lease, as
// when the process is stopped (SIGSTOP) while its writers are not.
func FreezeRenewals(v *Volume) {
	v.leaseStop()
	<-v.leaseDone
}

// FinishInFlight tells whether a finish of z is running (started and not
// ended, successfully or not).
func FinishInFlight(v *Volume, z lfs.ZoneID) bool {
	v.mu.Lock()
	op, ok := v.finishing[z]
	v.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-op.done:
		return false
	default:
		return true
	}
}

// StopBackground cancels v's background work (opens ahead, finishes) and
// waits for it to end, as a process exit does; v is not closed.
func StopBackground(v *Volume) {
	v.cancel()
	v.wg.Wait()
}
