package zctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

var pj = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true, Indent: "  "}

// emit writes v as JSON or YAML, or calls table for -o table. Protobuf
// messages (and slices of them) are written with their proto field names.
func (g *Globals) emit(v any, table func(io.Writer) error) error {
	if g.Output == "table" {
		return table(g.Out)
	}
	js, err := toJSON(v)
	if err != nil {
		return err
	}
	if g.Output == "yaml" {
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return err
		}
		_, err = g.Out.Write(y)
		return err
	}
	_, err = fmt.Fprintf(g.Out, "%s\n", js)
	return err
}

// toJSON renders v as indented JSON. protojson randomizes its whitespace on
// purpose, so its output is re-indented: zctl's JSON is stable for scripts.
func toJSON(v any) ([]byte, error) {
	switch m := v.(type) {
	case proto.Message:
		b, err := pj.Marshal(m)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	if rv, ok := protoSlice(v); ok {
		parts := make([]json.RawMessage, 0, len(rv))
		for _, m := range rv {
			b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
			if err != nil {
				return nil, err
			}
			parts = append(parts, b)
		}
		return json.MarshalIndent(parts, "", "  ")
	}
	return json.MarshalIndent(v, "", "  ")
}

func protoSlice(v any) ([]proto.Message, bool) {
	switch s := v.(type) {
	case []proto.Message:
		return s, true
	}
	return nil, false
}

func msgs[T proto.Message](in []T) []proto.Message {
	out := make([]proto.Message, len(in))
	for i, m := range in {
		out[i] = m
	}
	return out
}

func table(w io.Writer) *tabw { return newTab(w) }
