package paper

// ModelChoice is one choice of the eZNS figures' device or harness model
// that the papers do not fix outright, with its value and its source (or,
// for a fitted value, what it is fitted to). The manifest records them.
type ModelChoice struct {
	Figure string `json:"figure"`
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// EZNSModel lists the eZNS figures' model choices.
func EZNSModel() []ModelChoice {
	return []ModelChoice{
		{"fig27_28", "reclaim timing (paper run)", "T_ReadOnly 100 ms = two 50 ms CheckReclaim ticks",
			"eZNS §4.4.4: a namespace with \"no write activity for two cycles of global overdrive\" is reclaimed; §4.4.3: a cycle is the last N_essential physical zone allocations. The run reports two cycles at the busy phase's allocation rate (two_overdrive_cycles_ns)."},
		{"fig27_28", "reclaim timing (ZoneFleet default)", "T_ReadOnly 5 min, scaled by Run/100 s",
			"kept as a time bound: ZoneFleet's global overdrive is driven by allocations, so an idle cluster has no cycles to count; an operator who wants the paper's timing sets the arbiter's --t-readonly near two allocation intervals of the busy tenants"},
		{"fig29b", "write cache", "16 MiB, one pool admitted in arrival order (main rows)",
			"eZNS §3.5.2: \"the write cache, shared among all NAND dies\"; §7: \"isolating per-die write cache eliminates inter-zone write interference\" (a suggestion, not the evaluated drive)"},
		{"fig29b", "per-die back-pressure (die_backpressure rows)", "6.75 MiB a die (WriteCacheDieBytes)",
			"fitted, not from the paper: the limit at which the busy writer's two dies leave the wide writers their Fig. 14 share (155 of 213 MB/s, device ~2.4 GB/s); the paper does not say how its firmware admits writes"},
		{"fig29b, fig29c", "warm-up", "400 ms (per-die rows 1.5 s)",
			"steady state: the write cache is full before the measurement (eZNS §3.7: latency rises once the cache overflows)"},
		{"fig29c", "die scheduling", "reads ahead of queued programs (flash.Config.ReadPriority)",
			"eZNS Fig. 29c without a scheduler: readers at 199.6 MB/s each (their share of the 3.2 GB/s link) while the writers on the same dies starve (19.3 %, 27.3 % of max)"},
		{"fig29c", "readers' maximum", "their bandwidth with no scheduler",
			"eZNS §5: \"each reader achieves 199.6 MB/s\" with the scheduler off; CC+AC's 71.6 % is read against it"},
	}
}
