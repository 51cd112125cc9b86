package zctl

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// tabw is a tab-aligned table writer.
type tabw struct{ tw *tabwriter.Writer }

func newTab(w io.Writer) *tabw { return &tabw{tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)} }

func (t *tabw) row(format string, a ...any) { fmt.Fprintf(t.tw, format+"\n", a...) }
func (t *tabw) flush() error                { return t.tw.Flush() }

func bytesHuman(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func yesno(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
