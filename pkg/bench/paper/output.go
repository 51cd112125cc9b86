package paper

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/zonefleet/zonefleet/pkg/bench/znsplus"
	"github.com/zonefleet/zonefleet/pkg/buildinfo"
)

// WriteTable prints one block per figure: the ratios the paper quotes, ours
// next to the paper's.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, id := range r.Order {
		f, _ := lookup(id)
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "%s\t%s\n", id, f.Title)
		fmt.Fprintln(tw, "  RATIO\tZONEFLEET\tPAPER")
		for _, l := range r.Lines[id] {
			fmt.Fprintf(tw, "  %s\t%.3f\t%s\n", l.Label, l.Ours, l.Paper)
		}
	}
	return tw.Flush()
}

// Manifest records what produced a set of plots.
type Manifest struct {
	Commit    string         `json:"commit"`
	Version   string         `json:"version"`
	GoVersion string         `json:"go_version"`
	Figures   []string       `json:"figures"`
	Options   Options        `json:"options"`
	Seed      int64          `json:"seed"`
	Clock     string         `json:"clock"`
	Config    map[string]any `json:"config"`
	Files     []string       `json:"files"`
	// Model is the eZNS figures' model choices and their sources (the ZNS+
	// figure's are under config.zns_plus.calibrations).
	Model []ModelChoice `json:"ezns_model,omitempty"`
	// Lines are the table's rows per figure (ours beside the paper's), and
	// Fidelity the rows with the paper's number: docs/paper-figures.md's
	// fidelity table is generated from them.
	Lines    map[string][]Line `json:"lines"`
	Fidelity []FidelityRow     `json:"fidelity"`
	Results  json.RawMessage   `json:"results"`
}

// Seed is the seed of every random choice of the harness. The figures
// implemented so far make none (sequential I/O, fixed placement); it is
// recorded so that figures with random reads stay reproducible.
const Seed int64 = 1

// WriteOut writes one PNG per figure and manifest.json into dir.
func (r *Result) WriteOut(dir string, o Options) (*Manifest, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bi := buildinfo.Get()
	m := &Manifest{Commit: commit(bi.Revision), Version: bi.Version, GoVersion: bi.GoVersion, Figures: r.Order, Options: o,
		Seed: Seed, Clock: "sim (deterministic virtual clock)", Config: map[string]any{}}
	for _, id := range r.Order {
		switch v := r.Figures[id].(type) {
		case *Fig26Result:
			m.Config[id] = v.Config
		case *Fig27Result:
			m.Config[id] = v.Config
		case *Fig29aResult:
			m.Config[id] = v.Config
		case *Fig29bResult:
			m.Config[id] = v.Config
		case *Fig29cResult:
			m.Config[id] = v.Config
		case *ZNSPlusResult:
			m.Config[id] = map[string]any{"calibrations": znsplus.Calibrations(), "runs": v.Configs}
		case *PGCResult:
			m.Config[id] = map[string]any{"calibrations": znsplus.Calibrations(), "runs": v.Configs}
		case *ScalingResult:
			m.Config[id] = map[string]any{"calibrations": znsplus.Calibrations(), "runs": v.Configs}
		}
		name := id + ".png"
		if err := plotFigure(id, r.Figures[id], filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("plot %s: %w", id, err)
		}
		m.Files = append(m.Files, name)
	}
	for _, id := range r.Order {
		if strings.HasPrefix(id, "fig") {
			m.Model = EZNSModel()
			break
		}
	}
	m.Lines, m.Fidelity = r.Lines, r.Fidelity()
	res, err := json.Marshal(r.Figures)
	if err != nil {
		return nil, err
	}
	m.Results = res
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return m, os.WriteFile(filepath.Join(dir, "manifest.json"), append(b, '\n'), 0o644)
}

// commit is the build's VCS revision, or else the working directory's git
// HEAD (binaries built without VCS stamping, e.g. in a git worktree).
func commit(rev string) string {
	if rev != "" && rev != "unknown" {
		return rev
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "-dirty"
	}
	return c
}
