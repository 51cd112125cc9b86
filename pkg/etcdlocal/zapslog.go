package etcdlocal

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that writes etcd's log records to a slog
// handler, so that the embedded server logs with the process (and says why
// when it must stop: etcd logs at fatal level before it exits).
type slogCore struct {
	h       slog.Handler
	min     zapcore.Level
	attrs   []slog.Attr
	closing *atomic.Bool // set by Server.Close: only fatal records pass
	rate    *rateLimit
}

// rateLimit passes one record per message per second (a flood of
// connections makes etcd warn once per connection) and counts the others,
// which the next record passed reports as "suppressed".
type rateLimit struct {
	mu   sync.Mutex
	last map[string]time.Time
	skip map[string]int
}

const rateKeys = 1024 // distinct messages tracked at once (etcd's are constant strings)

func (r *rateLimit) allow(msg string, now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last[msg]) < time.Second {
		r.skip[msg]++
		return false, 0
	}
	if len(r.last) >= rateKeys {
		clear(r.last)
		clear(r.skip)
	}
	n := r.skip[msg]
	r.last[msg] = now
	delete(r.skip, msg)
	return true, n
}

// newZapLogger is a zap logger writing to log at level min and above
// (closing, when set, silences all but fatal records; may be nil).
func newZapLogger(log *slog.Logger, min zapcore.Level, closing *atomic.Bool) *zap.Logger {
	if closing == nil {
		closing = new(atomic.Bool)
	}
	return zap.New(&slogCore{h: log.Handler().WithGroup("etcd"), min: min, closing: closing,
		rate: &rateLimit{last: map[string]time.Time{}, skip: map[string]int{}}})
}

// quiet are etcd's warnings about choices made on purpose for an embedded
// single-member server: one port for gRPC and HTTP, and simple tokens
// (ZoneFleet's etcd authenticates clients by certificate).
var quiet = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	if c.closing.Load() {
		return l >= zapcore.DPanicLevel
	}
	return l >= c.min
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	n := *c
	n.attrs = append(append([]slog.Attr(nil), c.attrs...), attrsOf(fields)...)
	return &n
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) && (e.Level >= zapcore.ErrorLevel || !quiet[e.Message]) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	ok, suppressed := true, 0
	if e.Level < zapcore.DPanicLevel {
		ok, suppressed = c.rate.allow(e.Message, e.Time)
	}
	if !ok {
		return nil
	}
	r := slog.NewRecord(e.Time, levelOf(e.Level), e.Message, 0)
	if suppressed > 0 {
		r.AddAttrs(slog.Int("suppressed", suppressed))
	}
	r.AddAttrs(c.attrs...)
	r.AddAttrs(attrsOf(fields)...)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }

func levelOf(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func attrsOf(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // fields in a stable order
	out := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		out = append(out, slog.Any(k, enc.Fields[k]))
	}
	return out
}
