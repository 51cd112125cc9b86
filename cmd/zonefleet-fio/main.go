//go:build fioengine

// Command zonefleet-fio is an fio external I/O engine for ZoneFleet: a
// drive of a node or a tenant's v-zones as a host-managed zoned device
// for fio's --zonemode=zbd. It builds as a shared object with
// `make fio-engine` (cgo, -buildmode=c-shared, fio's headers: the build tag
// fioengine keeps it out of `go build ./...`):
//
//	fio --thread --ioengine=external:bin/zonefleet-fio.so --name=x --filename=zf \
//	    --node=node-1 --device=0 --zonemode=zbd --direct=1 --rw=write --bs=1M --size=8z
//
// engine.c is the fio side: the ioengine_ops table, the option table and
// fio's structures; this file is the Go side it calls, plain C types only
// (zf.h); pkg/fioengine does the work. The Go runtime starts when fio
// loads the engine, in fio's main process: a job fio forks (fio's default)
// has none of the runtime's threads and cannot run Go, so the engine
// refuses such jobs (engine.c) and jobs run with --thread (or thread=1).
package main

/*
#include <stdlib.h>
#include <string.h>
#include "zf.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime/cgo"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/zonefleet/zonefleet/pkg/fioengine"
)

func main() {}

func str(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// errOut copies msg into the caller's buffer (NUL-terminated, truncated).
func errOut(buf *C.char, n C.int, msg string) {
	if buf == nil || n <= 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(b[:n-1], msg)
	b[k] = 0
}

func options(c *C.struct_zf_conn) fioengine.Options {
	return fioengine.Options{Node: str(c.node), Addr: str(c.addr), Device: uint32(c.device), Namespace: str(c.ns),
		Arbiter: str(c.arbiter), Etcd: str(c.etcd), Config: str(c.config), ClusterName: str(c.cluster_name),
		Cluster: str(c.cluster), TokenFile: str(c.token_file), CAFile: str(c.ca_file), CertFile: str(c.cert_file),
		KeyFile: str(c.key_file), Insecure: c.insecure != 0, ZoneAppend: c.zone_append != 0, Zones: uint64(c.zones)}
}

// opTimeout bounds the control calls (open, report, reset) fio makes
// outside the I/O path.
const opTimeout = time.Minute

//export zf_target_open
func zf_target_open(c *C.struct_zf_conn, geo *C.struct_zf_geo, errbuf *C.char, errlen C.int) C.uintptr_t {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	t, err := fioengine.Open(ctx, options(c))
	if err != nil {
		errOut(errbuf, errlen, err.Error())
		return 0
	}
	g := t.Geometry()
	geo.block_size, geo.zone_size, geo.zone_cap = C.uint64_t(g.BlockSize), C.uint64_t(g.ZoneSize), C.uint64_t(g.ZoneCap)
	geo.zones, geo.max_open = C.uint64_t(g.Zones), C.uint32_t(g.MaxOpen)
	return C.uintptr_t(cgo.NewHandle(t))
}

//export zf_target_release
func zf_target_release(h C.uintptr_t) {
	ch := cgo.Handle(h)
	fioengine.Release(ch.Value().(fioengine.Target))
	ch.Delete()
}

// zf_report fills up to n zones from the zone at byte offset off and
// returns how many, or -errno.
//
//export zf_report
func zf_report(h C.uintptr_t, off C.uint64_t, zones *C.struct_zf_zone, n C.uint, errbuf *C.char, errlen C.int) C.int {
	t := cgo.Handle(h).Value().(fioengine.Target)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	g := t.Geometry()
	got, err := t.Report(ctx, uint64(off)/g.ZoneSize, int(n))
	if err != nil {
		errOut(errbuf, errlen, err.Error())
		return -C.int(fioengine.Errno(err))
	}
	out := unsafe.Slice(zones, int(n))
	for i, z := range got {
		out[i] = C.struct_zf_zone{start: C.uint64_t(z.Start), wp: C.uint64_t(z.WP), len: C.uint64_t(z.Len),
			capacity: C.uint64_t(z.Cap), _type: 2 /* ZBD_ZONE_TYPE_SWR */, cond: C.int(z.Cond)}
	}
	return C.int(len(got))
}

// zf_reset resets the zones of [off, off+n) and returns 0 or -errno.
//
//export zf_reset
func zf_reset(h C.uintptr_t, off, n C.uint64_t, errbuf *C.char, errlen C.int) C.int {
	t := cgo.Handle(h).Value().(fioengine.Target)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := fioengine.ResetRange(ctx, t, uint64(off), uint64(n)); err != nil {
		errOut(errbuf, errlen, err.Error())
		return -C.int(fioengine.Errno(err))
	}
	return 0
}

// queue is one fio thread's queue; the first failures are told on stderr
// with the cause fio's errno cannot carry.
type queue struct {
	*fioengine.Queue
	told atomic.Int32
}

const maxTold = 3

func (q *queue) tell(c fioengine.Completion) {
	if c.Err == nil || q.told.Add(1) > maxTold {
		return
	}
	kind := "i/o"
	if k := int(c.Op.Kind); k >= 0 && k < 5 {
		kind = [...]string{"read", "write", "trim", "sync", "datasync"}[k]
	}
	fmt.Fprintf(os.Stderr, "zonefleet: %s at offset %d, %d bytes: %v\n", kind, c.Op.Off, c.Op.Len, c.Err)
}

// zf_queue_new returns a queue on target h whose completions go to the
// C completion queue cq (zf_complete).
//
//export zf_queue_new
func zf_queue_new(h C.uintptr_t, zoneAppend C.int, cq unsafe.Pointer) C.uintptr_t {
	t := cgo.Handle(h).Value().(fioengine.Target)
	q := &queue{}
	q.Queue = fioengine.NewQueueFunc(t, zoneAppend != 0, func(c fioengine.Completion) {
		q.tell(c)
		C.zf_complete(cq, C.uintptr_t(c.Tag), C.int(c.Errno))
	})
	return C.uintptr_t(cgo.NewHandle(q))
}

//export zf_queue_free
func zf_queue_free(h C.uintptr_t) {
	ch := cgo.Handle(h)
	ch.Value().(*queue).Close()
	ch.Delete()
}

func op(tag C.uintptr_t, kind C.int, off C.uint64_t, buf unsafe.Pointer, n C.uint64_t) fioengine.Op {
	o := fioengine.Op{Tag: uintptr(tag), Kind: fioengine.Kind(kind), Off: uint64(off), Len: uint64(n)}
	if (o.Kind == fioengine.KindRead || o.Kind == fioengine.KindWrite) && buf != nil && n > 0 {
		o.Buf = unsafe.Slice((*byte)(buf), int(n)) // fio's buffer (C memory), used until the I/O completes
	}
	return o
}

// zf_submit starts one I/O; its completion goes to the queue's cq under tag.
//
//export zf_submit
func zf_submit(h C.uintptr_t, tag C.uintptr_t, kind C.int, off C.uint64_t, buf unsafe.Pointer, n C.uint64_t) {
	cgo.Handle(h).Value().(*queue).Submit(op(tag, kind, off, buf, n))
}

// zf_submit_batch starts n I/Os (fio's commit of what it queued): one
// entry into Go for the batch.
//
//export zf_submit_batch
func zf_submit_batch(h C.uintptr_t, ios *C.struct_zf_io, n C.int) {
	q := cgo.Handle(h).Value().(*queue)
	for _, io := range unsafe.Slice(ios, int(n)) {
		q.Submit(op(io.tag, io.kind, io.off, io.buf, io.len))
	}
}

// zf_do runs one I/O on the calling thread, fio's, and returns 0 or its
// errno: the synchronous path (iodepth=1) with no goroutine of its own and
// no completion queue, so an I/O costs one wake-up of fio's thread (the
// reply's) instead of a goroutine start and a completion hand-off.
//
//export zf_do
func zf_do(h C.uintptr_t, kind C.int, off C.uint64_t, buf unsafe.Pointer, n C.uint64_t) C.int {
	q := cgo.Handle(h).Value().(*queue)
	c := q.Do(op(0, kind, off, buf, n))
	q.tell(c)
	return C.int(c.Errno)
}
