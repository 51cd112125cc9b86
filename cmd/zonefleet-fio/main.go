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
	"runtime"
	"runtime/cgo"
	"sync/atomic"
	"syscall"
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

	sq         unsafe.Pointer // the C submission queue (iodepth > 1), nil otherwise
	efd        *os.File       // its eventfd, in the runtime's poller
	dispatched chan struct{}  // closed when the dispatcher returns
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
// C completion queue cq (complete). With a submission queue sq (fio's
// iodepth > 1) and its non-blocking eventfd efd, a dispatcher goroutine
// takes the I/Os fio commits from sq (zf_sq_add in engine.c).
//
//export zf_queue_new
func zf_queue_new(h C.uintptr_t, zoneAppend C.int, cq, sq unsafe.Pointer, efd C.int) C.uintptr_t {
	t := cgo.Handle(h).Value().(fioengine.Target)
	q := &queue{sq: sq}
	q.Queue = fioengine.NewQueueFunc(t, zoneAppend != 0, func(c fioengine.Completion) {
		q.tell(c)
		complete((*C.struct_zf_cq)(cq), c.Tag, c.Errno)
	})
	if sq != nil {
		q.efd = os.NewFile(uintptr(efd), "zonefleet-sq") // (non-blocking: reads park in the poller)
		q.dispatched = make(chan struct{})
		go q.dispatch()
	}
	return C.uintptr_t(cgo.NewHandle(q))
}

// complete adds a completion to the C completion queue cq (zf.h) and
// wakes fio's thread if it sleeps for it. It runs in Go, with atomics on
// the C memory and a raw futex wake: a cgo call or a syscall the runtime
// knows of marks the goroutine's P as in a system call, and the wake-up
// often preempts the waker at once, so the P would wait for the runtime's
// monitor to take it back.
func complete(cq *C.struct_zf_cq, tag uintptr, errno int) {
	pos := atomic.AddUint64((*uint64)(&cq.tail), 1) - 1
	s := &unsafe.Slice(cq.ring, int(cq.cap))[pos%uint64(cq.cap)]
	// (the slot's previous completion is taken: fio has at most cap I/Os
	// in flight, so the one cap positions back was reaped before this I/O
	// was queued; the loop only guards the invariant)
	for atomic.LoadUint64((*uint64)(&s.seq)) != pos {
		runtime.Gosched()
	}
	s.tag, s.err = C.uintptr_t(tag), C.int(errno)
	atomic.StoreUint64((*uint64)(&s.seq), pos+1)
	done := atomic.AddUint64((*uint64)(&cq.done), 1)
	if want := atomic.LoadUint64((*uint64)(&cq.want)); want != 0 && done >= want {
		atomic.AddUint32((*uint32)(&cq.futex), 1)
		_, _, _ = syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&cq.futex)), futexWakePrivate, 1, 0, 0, 0)
	}
}

// futexWakePrivate is FUTEX_WAKE|FUTEX_PRIVATE_FLAG.
const futexWakePrivate = 1 | 128

// dispatch submits what fio commits to the submission queue, and sleeps
// on its eventfd when there is none, until the eventfd closes.
func (q *queue) dispatch() {
	defer close(q.dispatched)
	ios := make([]C.struct_zf_io, 64)
	var b [8]byte
	for {
		for {
			n := int(C.zf_sq_take(q.sq, &ios[0], C.int(len(ios))))
			for _, io := range ios[:n] {
				q.Submit(op(io.tag, io.kind, io.off, io.buf, io.len))
			}
			if n < len(ios) {
				break
			}
		}
		if C.zf_sq_idle(q.sq) == 0 {
			continue
		}
		if _, err := q.efd.Read(b[:]); err != nil {
			return // (closed: zf_queue_free)
		}
	}
}

//export zf_queue_free
func zf_queue_free(h C.uintptr_t) {
	ch := cgo.Handle(h)
	q := ch.Value().(*queue)
	if q.efd != nil {
		_ = q.efd.Close()
		<-q.dispatched // (before fio frees the ring)
	}
	q.Close()
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
