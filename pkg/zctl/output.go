package zctl

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"
)

// emit writes v as JSON or YAML, or calls table for -o table.
func (g *Globals) emit(v any, table func(io.Writer) error) error {
	switch g.Output {
	case "json":
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		js, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return err
		}
		_, err = g.Out.Write(y)
		return err
	}
	return table(g.Out)
}

// progress prints to stderr only when it is a terminal: long operations show
// what they do to people and stay quiet in pipes and scripts.
func (g *Globals) progress(format string, a ...any) {
	f, ok := g.Err.(*os.File)
	if !ok {
		return
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return
	}
	fmt.Fprintf(f, format+"\n", a...)
}
