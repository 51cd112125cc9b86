//go:build fioengine

/*
 * The fio side of the ZoneFleet engine: fio's ioengine_ops (version
 * FIO_IOOPS_VERSION of the fio headers it is built against, which must be
 * the installed fio's), its options, and the mapping of fio's structures to
 * the Go side's plain calls (zf.h, main.go).
 *
 * Lifecycle. fio sizes the file (get_file_size) and sets up zoned mode
 * (get_zoned_model, report_zones, get_max_open_zones, reset_wp) in its main
 * process, then starts the job; init runs in the job. The engine's state
 * (struct zf_data in td->io_ops_data) is made by whichever of these comes
 * first and holds the target (one connection per target per process,
 * shared by the jobs that name the same one) and the job's queue.
 *
 * Threads only. The Go runtime runs in the process that loaded the engine;
 * a forked job has none of its threads, so every entry point checks that it
 * runs in that process and fails the job with a clear error otherwise.
 *
 * I/O. With iodepth=1, queue() runs the I/O inside Go on fio's thread
 * (zf_do) and returns FIO_Q_COMPLETED (fio accounts it as a sync engine's):
 * the thread sleeps only in the Go runtime, until the reply, with no
 * goroutine to start and no completion to hand back. Deeper queues collect
 * I/Os in queue(); commit() adds them to the job's submission queue (struct
 * zf_sq), whose Go dispatcher hands each to a worker goroutine (a zone's
 * writes one at a time, in order); the worker adds its completion to the
 * job's completion queue (struct zf_cq), which getevents() sleeps on. Both
 * queues are lock-free rings, and fio's thread enters Go neither to submit
 * nor to reap: its only hand-offs are a futex wake-up per batch of
 * completions and an eventfd write when the dispatcher sleeps. Trims reset
 * whole zones; fsync flushes the drives.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <sched.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"
#include "zbd_types.h"

#include "zf.h"
#include "_cgo_export.h"

_Static_assert(sizeof(struct zf_zone) == sizeof(struct zbd_zone), "struct zbd_zone layout");
_Static_assert(offsetof(struct zf_zone, capacity) == offsetof(struct zbd_zone, capacity), "struct zbd_zone layout");
_Static_assert(offsetof(struct zf_zone, cond) == offsetof(struct zbd_zone, cond), "struct zbd_zone layout");
_Static_assert(FIO_IOOPS_VERSION == 31, "built against the fio 3.33 engine ABI");

struct zf_options {
	void *pad; /* fio: an option's off1 is never 0 */
	char *node;
	char *addr;
	unsigned int device;
	char *ns;
	char *arbiter;
	char *etcd;
	char *config;
	char *cluster_name;
	char *cluster;
	char *token_file;
	char *ca_file;
	char *cert_file;
	char *key_file;
	unsigned int insecure;
	unsigned int zone_append;
	unsigned int zones;
	unsigned int busy_poll;
	unsigned int inline_sync;
};

#define ZF_OPT(nm, field, typ, hlp) { \
	.name = nm, .lname = "zonefleet " nm, .type = typ, .help = hlp, \
	.off1 = offsetof(struct zf_options, field), \
	.category = FIO_OPT_C_ENGINE, .group = FIO_OPT_G_INVALID, }

static struct fio_option options[] = {
	ZF_OPT("node", node, FIO_OPT_STR_STORE, "drive target: node id (its address from the arbiter)"),
	ZF_OPT("addr", addr, FIO_OPT_STR_STORE, "drive target: node address, instead of node="),
	ZF_OPT("device", device, FIO_OPT_INT, "drive target: device index on the node (default 0)"),
	ZF_OPT("namespace", ns, FIO_OPT_STR_STORE, "v-zone target: the tenant namespace (zone i is v-zone i)"),
	ZF_OPT("zones", zones, FIO_OPT_INT, "v-zone target: use v-zones 0..zones-1 (default: the namespace's quota)"),
	ZF_OPT("arbiter", arbiter, FIO_OPT_STR_STORE, "arbiter addresses, comma-separated ($ZONEFLEET_ARBITER)"),
	ZF_OPT("etcd", etcd, FIO_OPT_STR_STORE, "etcd endpoints, comma-separated ($ZONEFLEET_ETCD)"),
	ZF_OPT("config", config, FIO_OPT_STR_STORE, "zctl's config file ($ZONEFLEET_CONFIG)"),
	ZF_OPT("cluster_name", cluster_name, FIO_OPT_STR_STORE, "cluster of zctl's config file ($ZONEFLEET_CLUSTER_NAME)"),
	ZF_OPT("cluster", cluster, FIO_OPT_STR_STORE, "cluster.json of zctl local up ($ZONEFLEET_CLUSTER)"),
	ZF_OPT("token_file", token_file, FIO_OPT_STR_STORE, "admin or namespace token file ($ZONEFLEET_TOKEN_FILE)"),
	ZF_OPT("ca_file", ca_file, FIO_OPT_STR_STORE, "cluster CA certificate ($ZONEFLEET_CA_FILE)"),
	ZF_OPT("cert_file", cert_file, FIO_OPT_STR_STORE, "client certificate ($ZONEFLEET_CERT_FILE)"),
	ZF_OPT("key_file", key_file, FIO_OPT_STR_STORE, "client certificate key ($ZONEFLEET_KEY_FILE)"),
	ZF_OPT("insecure", insecure, FIO_OPT_BOOL, "dial plaintext (clusters started with --insecure)"),
	ZF_OPT("zone_append", zone_append, FIO_OPT_BOOL, "issue writes as zone appends and check where they landed"),
	ZF_OPT("busy_poll", busy_poll, FIO_OPT_BOOL, "poll for completions instead of sleeping (fewer thread wake-ups, one core busy)"),
	{ .name = "inline", .lname = "zonefleet inline", .type = FIO_OPT_BOOL, .def = "1",
	  .help = "iodepth=1: run each I/O inside Go on fio's thread (0: on a goroutine, completion through the queue)",
	  .off1 = offsetof(struct zf_options, inline_sync), .category = FIO_OPT_C_ENGINE, .group = FIO_OPT_G_INVALID, },
	{ .name = NULL, },
};

/*
 * A job's completion queue (struct zf_cq, zf.h): goroutines add completed
 * I/Os (main.go complete), the job's thread takes them in getevents and
 * sleeps on the queue's futex while it has too few.
 */
struct zf_done {
	uintptr_t tag;
	int err;
};

static void zf_cq_init(struct zf_cq *q, unsigned int cap)
{
	unsigned int i;

	q->cap = cap;
	for (i = 0; i < cap; i++)
		q->ring[i].seq = i;
}

/* zf_cq_take moves up to max completions, in position order, into out. */
static unsigned int zf_cq_take(struct zf_cq *q, unsigned int max, struct zf_done *out)
{
	unsigned int n = 0;

	while (n < max) {
		struct zf_slot *s = &q->ring[q->head % q->cap];

		if (__atomic_load_n(&s->seq, __ATOMIC_SEQ_CST) != q->head + 1)
			break; /* (not added yet, or added out of order behind one that is not) */
		out[n++] = (struct zf_done){ .tag = s->tag, .err = s->err };
		__atomic_store_n(&s->seq, q->head + q->cap, __ATOMIC_RELEASE);
		q->head++;
	}
	return n;
}

static int64_t zf_now_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* zf_cq_wait waits until min completions are there (or t passes), then
 * takes up to max into out and returns how many. */
static unsigned int zf_cq_wait(struct zf_cq *q, unsigned int min, unsigned int max,
			       const struct timespec *t, struct zf_done *out)
{
	int64_t until = 0;
	unsigned int n = 0;

	if (t)
		until = zf_now_ns() + (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
	if (min > max)
		min = max;
	for (;;) {
		struct timespec left, *tl = NULL;
		uint32_t f;

		n += zf_cq_take(q, max - n, out + n);
		if (n >= min)
			return n;
		if (t) {
			int64_t ns = until - zf_now_ns();

			if (ns <= 0)
				return n;
			left.tv_sec = ns / 1000000000;
			left.tv_nsec = ns % 1000000000;
			tl = &left;
		}
		if (q->busy_poll) { /* wait running: the completion needs no wake-up */
			sched_yield();
			continue;
		}
		f = __atomic_load_n(&q->futex, __ATOMIC_SEQ_CST);
		__atomic_store_n(&q->want, q->head + (min - n), __ATOMIC_SEQ_CST);
		n += zf_cq_take(q, max - n, out + n); /* (added before want was seen) */
		if (n < min)
			syscall(SYS_futex, &q->futex, FUTEX_WAIT_PRIVATE, f, tl, NULL, 0);
		__atomic_store_n(&q->want, 0, __ATOMIC_SEQ_CST);
	}
}

/*
 * A job's submission queue (iodepth > 1): commit() adds the I/Os fio
 * queued to a ring the Go side's dispatcher takes them from (zf_sq_take),
 * and writes the queue's eventfd only when the dispatcher sleeps on it
 * (zf_sq_idle). fio's thread thus never enters Go to submit: a C thread
 * that calls into Go needs a P of the runtime for the call and keeps it,
 * idle, while it runs fio and sleeps in getevents, until the runtime's
 * monitor takes it back (at 20 µs ticks) — and the goroutine the call
 * started waits on that P meanwhile. The dispatcher instead parks in the
 * runtime's poller, as a goroutine waiting for its socket does. One
 * producer (the job's thread), one consumer (the dispatcher); the ring
 * holds iodepth I/Os, more than fio has in flight.
 */
struct zf_sq {
	struct zf_io *ring;
	unsigned int cap;
	uint64_t head; /* the next I/O to take (the dispatcher) */
	uint64_t tail; /* I/Os added (the job's thread) */
	int sleeping;  /* the dispatcher waits on efd */
	int efd;
};

/* zf_sq_add adds n I/Os and wakes the dispatcher if it sleeps. */
static void zf_sq_add(struct zf_sq *q, const struct zf_io *ios, unsigned int n)
{
	uint64_t t = q->tail;
	unsigned int i;

	/* (the slots are free: their I/Os cap positions back completed
	 * before fio queued these) */
	for (i = 0; i < n; i++)
		q->ring[(t + i) % q->cap] = ios[i];
	__atomic_store_n(&q->tail, t + n, __ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&q->sleeping, 0, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;

		while (write(q->efd, &one, sizeof(one)) < 0 && errno == EINTR)
			;
	}
}

int zf_sq_take(void *p, struct zf_io *out, int max)
{
	struct zf_sq *q = p;
	uint64_t h = q->head, t = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
	int n = 0;

	while (h != t && n < max)
		out[n++] = q->ring[h++ % q->cap];
	__atomic_store_n(&q->head, h, __ATOMIC_RELEASE);
	return n;
}

int zf_sq_idle(void *p)
{
	struct zf_sq *q = p;

	__atomic_store_n(&q->sleeping, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&q->tail, __ATOMIC_SEQ_CST) == q->head)
		return 1;
	/* I/Os came as it went idle: take them now, unless commit() saw the
	 * flag first and is writing efd (then the read returns at once) */
	return !__atomic_compare_exchange_n(&q->sleeping, &(int){ 1 }, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

struct zf_data {
	uintptr_t target;
	uintptr_t queue;
	struct zf_geo geo;
	int sync;
	int inline_sync;
	unsigned int depth;
	unsigned int npend;
	struct zf_io *pend;
	struct zf_cq cq;
	struct zf_sq sq;
	struct io_u **events;
	struct zf_done *dones;
};

static pid_t zf_loader_pid;

__attribute__((constructor)) static void zf_loaded(void)
{
	zf_loader_pid = getpid();
}

static int zf_forked(struct thread_data *td)
{
	if (getpid() == zf_loader_pid)
		return 0;
	log_err("zonefleet: job %s runs in a forked process: the engine needs fio's threads (--thread or thread=1)\n", td->o.name);
	td_verror(td, EINVAL, "zonefleet engine needs --thread");
	return 1;
}

static void zf_str(const char **dst, const char *src)
{
	*dst = (src && *src) ? src : NULL;
}

/* zf_get returns the job's engine state, opening the target the first time. */
static struct zf_data *zf_get(struct thread_data *td)
{
	struct zf_options *o = td->eo;
	struct zf_data *d = td->io_ops_data;
	struct zf_conn c;
	char err[512] = "";

	if (d)
		return d;
	if (zf_forked(td))
		return NULL;
	memset(&c, 0, sizeof(c));
	zf_str(&c.node, o->node);
	zf_str(&c.addr, o->addr);
	c.device = o->device;
	zf_str(&c.ns, o->ns);
	zf_str(&c.arbiter, o->arbiter);
	zf_str(&c.etcd, o->etcd);
	zf_str(&c.config, o->config);
	zf_str(&c.cluster_name, o->cluster_name);
	zf_str(&c.cluster, o->cluster);
	zf_str(&c.token_file, o->token_file);
	zf_str(&c.ca_file, o->ca_file);
	zf_str(&c.cert_file, o->cert_file);
	zf_str(&c.key_file, o->key_file);
	c.insecure = o->insecure;
	c.zone_append = o->zone_append;
	c.zones = o->zones;

	d = calloc(1, sizeof(*d));
	if (!d) {
		td_verror(td, ENOMEM, "zonefleet: state");
		return NULL;
	}
	d->target = zf_target_open(&c, &d->geo, err, sizeof(err));
	if (!d->target) {
		log_err("zonefleet: %s: %s\n", td->o.name, err);
		td_verror(td, EINVAL, "zonefleet: open target");
		free(d);
		return NULL;
	}
	td->io_ops_data = d;
	return d;
}

static int zf_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct zf_data *d = zf_get(td);

	if (!d)
		return 1;
	f->real_file_size = d->geo.zones * d->geo.zone_size;
	f->filetype = FIO_TYPE_BLOCK; /* a zoned block device, not a file fio emulates zones in */
	fio_file_set_size_known(f);
	return 0;
}

static int zf_init(struct thread_data *td)
{
	struct zf_data *d;
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;

	if (zf_forked(td)) /* (the state the main process made is no use here) */
		return 1;
	d = zf_get(td);
	if (!d)
		return 1;
	if (d->queue)
		return 0;
	d->depth = depth;
	d->sync = depth == 1;
	if (d->sync) /* fio accounts the I/O as a sync engine's (latency = the call) */
		td->flags |= (unsigned long long)FIO_SYNCIO << TD_ENG_FLAG_SHIFT;
	d->events = calloc(depth, sizeof(*d->events));
	d->dones = calloc(depth, sizeof(*d->dones));
	d->pend = calloc(depth, sizeof(*d->pend));
	d->inline_sync = d->sync && ((struct zf_options *)td->eo)->inline_sync;
	d->cq.ring = calloc(depth, sizeof(*d->cq.ring));
	if (!d->events || !d->dones || !d->cq.ring || !d->pend) {
		td_verror(td, ENOMEM, "zonefleet: queue");
		return 1;
	}
	zf_cq_init(&d->cq, depth);
	d->cq.busy_poll = ((struct zf_options *)td->eo)->busy_poll;
	d->sq.efd = -1;
	if (!d->sync) {
		d->sq.ring = calloc(depth, sizeof(*d->sq.ring));
		d->sq.cap = depth;
		d->sq.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (!d->sq.ring || d->sq.efd < 0) {
			td_verror(td, errno ? errno : ENOMEM, "zonefleet: submission queue");
			return 1;
		}
	}
	d->queue = zf_queue_new(d->target, ((struct zf_options *)td->eo)->zone_append, &d->cq,
				d->sync ? NULL : &d->sq, d->sq.efd);
	return 0;
}

static void zf_cleanup(struct thread_data *td)
{
	struct zf_data *d = td->io_ops_data;

	if (!d)
		return;
	if (getpid() == zf_loader_pid) {
		if (d->queue)
			zf_queue_free(d->queue);
		zf_target_release(d->target);
	}
	free(d->cq.ring);
	free(d->events);
	free(d->dones);
	free(d->pend);
	if (!d->queue && d->sq.ring && d->sq.efd >= 0) /* (else zf_queue_free closed it) */
		close(d->sq.efd);
	free(d->sq.ring);
	free(d);
	td->io_ops_data = NULL;
}

static enum fio_q_status zf_queue(struct thread_data *td, struct io_u *io_u)
{
	struct zf_data *d = td->io_ops_data;
	uint64_t len = io_u->xfer_buflen;

	fio_ro_check(td, io_u);
	if (io_u->ddir != DDIR_READ && io_u->ddir != DDIR_WRITE && io_u->ddir != DDIR_TRIM &&
	    io_u->ddir != DDIR_SYNC && io_u->ddir != DDIR_DATASYNC) {
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (io_u->ddir == DDIR_TRIM)
		len = io_u->xfer_buflen;
	if (d->sync) { /* (an engine with commit() counts its own submissions) */
		if (d->inline_sync) {
			io_u->error = zf_do(d->queue, io_u->ddir, io_u->offset, io_u->xfer_buf, len);
		} else {
			zf_submit(d->queue, (uintptr_t)io_u, io_u->ddir, io_u->offset, io_u->xfer_buf, len);
			zf_cq_wait(&d->cq, 1, 1, NULL, d->dones);
			io_u->error = d->dones[0].err;
		}
		io_u_mark_submit(td, 1);
		io_u_mark_complete(td, 1);
		return FIO_Q_COMPLETED;
	}
	if (d->npend == d->depth) /* (fio commits before it queues more than iodepth) */
		return FIO_Q_BUSY;
	d->pend[d->npend++] = (struct zf_io){ .tag = (uintptr_t)io_u, .kind = io_u->ddir, .off = io_u->offset,
					      .buf = io_u->xfer_buf, .len = len };
	return FIO_Q_QUEUED;
}

/* zf_commit starts what queue() collected since the last commit: one entry
 * into Go per batch (fio's iodepth_batch_submit sets its size). */
static int zf_commit(struct thread_data *td)
{
	struct zf_data *d = td->io_ops_data;
	struct timespec now;
	unsigned int i;

	if (!d->npend)
		return 0;
	/* (an engine with commit() stamps the issue time and counts its own
	 * submissions: fio's latencies start here) */
	if (fio_fill_issue_time(td))
		fio_gettime(&now, NULL);
	for (i = 0; i < d->npend; i++) {
		struct io_u *io_u = (struct io_u *)d->pend[i].tag;

		if (fio_fill_issue_time(td))
			io_u->issue_time = now;
		io_u_queued(td, io_u);
	}
	zf_sq_add(&d->sq, d->pend, d->npend);
	io_u_mark_submit(td, d->npend);
	d->npend = 0;
	return 0;
}

static int zf_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			const struct timespec *t)
{
	struct zf_data *d = td->io_ops_data;
	unsigned int i, n;

	if (max > d->depth)
		max = d->depth;
	n = zf_cq_wait(&d->cq, min, max, t, d->dones);
	for (i = 0; i < n; i++) {
		d->events[i] = (struct io_u *)d->dones[i].tag;
		d->events[i]->error = d->dones[i].err;
	}
	return n;
}

static struct io_u *zf_event(struct thread_data *td, int event)
{
	struct zf_data *d = td->io_ops_data;

	return d->events[event];
}

static int zf_open_file(struct thread_data *td, struct fio_file *f)
{
	return zf_get(td) ? 0 : 1;
}

static int zf_close_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int zf_invalidate(struct thread_data *td, struct fio_file *f)
{
	return 0; /* no host cache to drop: every read goes to the nodes */
}

static int zf_get_zoned_model(struct thread_data *td, struct fio_file *f, enum zbd_zoned_model *model)
{
	if (!zf_get(td))
		return -EINVAL;
	*model = ZBD_HOST_MANAGED;
	return 0;
}

static int zf_report_zones(struct thread_data *td, struct fio_file *f, uint64_t offset,
			   struct zbd_zone *zones, unsigned int nr_zones)
{
	struct zf_data *d = zf_get(td);
	char err[512] = "";
	int n;

	if (!d)
		return -EINVAL;
	n = zf_report(d->target, offset, (struct zf_zone *)zones, nr_zones, err, sizeof(err));
	if (n < 0)
		log_err("zonefleet: report zones: %s\n", err);
	return n;
}

static int zf_reset_wp(struct thread_data *td, struct fio_file *f, uint64_t offset, uint64_t length)
{
	struct zf_data *d = zf_get(td);
	char err[512] = "";
	int ret;

	if (!d)
		return -EINVAL;
	ret = zf_reset(d->target, offset, length, err, sizeof(err));
	if (ret < 0)
		log_err("zonefleet: reset zones: %s\n", err);
	return ret;
}

static int zf_get_max_open_zones(struct thread_data *td, struct fio_file *f, unsigned int *max_open_zones)
{
	struct zf_data *d = zf_get(td);

	if (!d)
		return -EINVAL;
	*max_open_zones = d->geo.max_open;
	return 0;
}

struct ioengine_ops ioengine = {
	.name			= "zonefleet",
	.version		= FIO_IOOPS_VERSION,
	.flags			= FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_RAWIO |
			  FIO_ASYNCIO_SETS_ISSUE_TIME,
	.init			= zf_init,
	.queue			= zf_queue,
	.commit			= zf_commit,
	.getevents		= zf_getevents,
	.event			= zf_event,
	.cleanup		= zf_cleanup,
	.open_file		= zf_open_file,
	.close_file		= zf_close_file,
	.invalidate		= zf_invalidate,
	.get_file_size		= zf_get_file_size,
	.get_zoned_model	= zf_get_zoned_model,
	.report_zones		= zf_report_zones,
	.reset_wp		= zf_reset_wp,
	.get_max_open_zones	= zf_get_max_open_zones,
	.options		= options,
	.option_struct_size	= sizeof(struct zf_options),
};
