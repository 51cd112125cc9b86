package paper

// Status says whether a figure of the papers runs.
type Status string

// The statuses of --list.
const (
	Runs            Status = "runs"
	Pending         Status = "pending"          // the mechanism's own work has not landed it yet
	NotReproducible Status = "not reproducible" // the harness cannot make it; Reason says why
)

// Entry is one row of `zctl bench paper --list`.
type Entry struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Paper  string `json:"paper"`
	Status Status `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// unavailable are the papers' figures that do not run, with the reason. A
// figure that lands moves to the figures registry (paper.go).
var unavailable = []Entry{
	{ID: "qblk_scaling", Title: "QBLK: write bandwidth and latency vs. concurrent clients", Status: Pending,
		Reason: "the node's multi-queue write cache runs (ssdnode --write-cache-queues; zctl bench node reports efficiency against the CPU ceiling and lock wait per GiB), but the many-core model of the paper's 1-256 threads is not built: this machine has 2 cores"},
	{ID: "zns_plus_fig10", Title: "ZNS+ Fig. 10: chip utilization over time", Status: Pending,
		Reason: "the drive accumulates chip busy time; no timeline is sampled"},
	{ID: "zns_plus_ycsb", Title: "ZNS+ Fig. 6-7 YCSB rows", Status: NotReproducible,
		Reason: "YCSB on MySQL: the harness runs a tpcc-like I/O pattern (the zns_plus figure's tpcc rows), not YCSB's key-value mix"},
	{ID: "zns_plus_fig13", Title: "ZNS+ Fig. 13: Cosmos+ OpenSSD prototype", Status: NotReproducible,
		Reason: "real hardware"},
}

// Catalog lists every figure: those that run (in registry order), then
// those that do not.
func Catalog() []Entry {
	var out []Entry
	for _, f := range figures {
		out = append(out, Entry{ID: f.ID, Title: f.Title, Paper: f.Paper, Status: Runs})
	}
	return append(out, unavailable...)
}
