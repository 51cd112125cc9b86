package arbiter

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// historyKeeper compacts etcd's history behind the leader: every tick it
// compacts at the revision it saw on the previous tick, so at least one
// interval of history stays for watchers (nodes' grant watches, the
// arbiters' node watch) and the election. It also polls etcd's alarms and
// database size into the metrics.
type historyKeeper struct {
	prev int64
}

// tick runs one compaction round; it returns the error of the compaction
// (an already compacted revision is not an error).
func (a *Arbiter) historyTick(ctx context.Context, h *historyKeeper) error {
	resp, err := a.cli.Get(ctx, formatKey)
	if err != nil {
		return a.etcdError(err, "read revision")
	}
	cur := resp.Header.Revision
	var cerr error
	if h.prev > 0 && h.prev < cur {
		if _, err := a.cli.Compact(ctx, h.prev); err != nil && !errors.Is(err, rpctypes.ErrCompacted) && !errors.Is(err, rpctypes.ErrGRPCCompacted) {
			cerr = a.etcdError(err, "compact")
		} else if err == nil {
			a.m.compactions.Inc()
		}
	}
	h.prev = cur
	a.pollAlarms(ctx)
	return cerr
}

// pollAlarms sets zonefleet_arbiter_etcd_alarm and the database size gauge.
func (a *Arbiter) pollAlarms(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	al, err := a.cli.AlarmList(actx)
	if err != nil {
		return
	}
	var nospace, corrupt float64
	for _, m := range al.Alarms {
		switch m.Alarm {
		case etcdserverpb.AlarmType_NOSPACE:
			nospace = 1
		case etcdserverpb.AlarmType_CORRUPT:
			corrupt = 1
		}
	}
	if nospace > 0 {
		a.log.Error("etcd NOSPACE alarm raised: state changes fail until etcd is compacted, defragmented and the alarm disarmed")
	}
	a.m.alarm.WithLabelValues("nospace").Set(nospace)
	a.m.alarm.WithLabelValues("corrupt").Set(corrupt)
	var size int64
	for _, ep := range a.cli.Endpoints() {
		if st, err := a.cli.Status(actx, ep); err == nil {
			size = max(size, st.DbSize)
		}
	}
	if size > 0 {
		a.m.dbSize.Set(float64(size))
	}
}
