package client

import "time"

// SetPPTestHook sets a hook that runs after a PP log switch reset the other
// log and before the record is written there (an error fails the append);
// the returned func restores the previous hook.
func SetPPTestHook(f func(group uint32, row, covered uint64) error) func() {
	old := ppTestHook
	ppTestHook = f
	return func() { ppTestHook = old }
}

// MakeActivityDue backdates the client's last activity report by more than
// the report interval, so the next write reports (unless a report is still
// in flight: see ActivityIdle). Tests use it instead of waiting a second.
func MakeActivityDue(c *Client) {
	c.mu.Lock()
	c.lastActivity = c.lastActivity.Add(-2 * time.Second)
	c.mu.Unlock()
}

// ActivityIdle reports whether no activity report is in flight.
func ActivityIdle(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.activityBusy
}
