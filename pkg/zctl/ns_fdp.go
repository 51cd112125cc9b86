package zctl

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "github.com/zonefleet/zonefleet/api/zonefleet/v1"
	"github.com/zonefleet/zonefleet/pkg/cluster"
	"github.com/zonefleet/zonefleet/pkg/zerr"
)

// kindFlag is --kind: parsed once, as the flag is set (a bad value is a
// usage error), sent in its canonical form.
type kindFlag struct{ k cluster.NamespaceKind }

func (f *kindFlag) String() string     { return f.k.String() }
func (f *kindFlag) Set(s string) error { return f.k.UnmarshalText([]byte(s)) }
func (f *kindFlag) Type() string       { return "kind" }

// bytesFlag is a byte count: digits with an optional binary suffix (K, M,
// G, T, with or without "iB"; B alone is bytes).
type bytesFlag struct{ n uint64 }

func (f *bytesFlag) String() string { return strconv.FormatUint(f.n, 10) }
func (f *bytesFlag) Type() string   { return "bytes" }
func (f *bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	f.n = n
	return nil
}

func parseBytes(s string) (uint64, error) {
	bad := &zerr.InvalidArgumentError{Field: "bytes", Reason: fmt.Sprintf("%q is not a byte count (e.g. 4096, 64MiB, 1GiB)", s)}
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "iB"), "B")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		case 'T', 't':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n > (^uint64(0))>>shift {
		return 0, bad
	}
	return n << shift, nil
}

// iec is n bytes in the largest binary unit that keeps it whole.
func iec(n uint64) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// nsKind is the KIND column ("zoned" for an arbiter that sends none).
func nsKind(n *v1.Namespace) string {
	if k := n.GetKind(); k != "" {
		return k
	}
	return "zoned"
}

// fdpNSShow is `zctl ns show` of an fdp namespace.
func fdpNSShow(w io.Writer, n *v1.Namespace) error {
	g := n.GetFdp()
	t := table(w)
	t.row("name:\t%s", n.GetName())
	t.row("kind:\tfdp")
	t.row("weight:\t%d", n.GetWeight())
	t.row("capacity:\t%s (%d LBAs of %d bytes)", iec(g.GetLbas()*uint64(g.GetBlockSize())), g.GetLbas(), g.GetBlockSize())
	t.row("drive:\tnode %s (%s), FDP device %d, LBAs [%d, %d)", g.GetNode(), g.GetAddr(), g.GetDevice(), g.GetFirstLba(), g.GetFirstLba()+g.GetLbas())
	hs := make([]string, len(g.GetHandles()))
	for i, h := range g.GetHandles() {
		hs[i] = fmt.Sprintf("%d→%d", i, h)
	}
	t.row("placement handles:\t%d (namespace→drive: %s), %d reclaim groups", len(hs), strings.Join(hs, " "), g.GetReclaimGroups())
	t.row("state:\t%s", nsState(n))
	return t.flush()
}
