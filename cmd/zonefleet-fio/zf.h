/*
 * The interface between the fio engine's C part (engine.c, which includes
 * fio's headers) and its Go part (main.go): plain C types only, so that the
 * Go side never parses fio's headers.
 */
#ifndef ZONEFLEET_FIO_ZF_H
#define ZONEFLEET_FIO_ZF_H

#include <stdint.h>

/* The engine options a target is opened with (NULL: not given). */
struct zf_conn {
	const char *node;
	const char *addr;
	unsigned int device;
	const char *ns;
	const char *arbiter;
	const char *etcd;
	const char *config;
	const char *cluster_name;
	const char *cluster;
	const char *token_file;
	const char *ca_file;
	const char *cert_file;
	const char *key_file;
	int insecure;
	int zone_append;
	uint64_t zones;
};

/* A target's geometry, in bytes. */
struct zf_geo {
	uint64_t block_size;
	uint64_t zone_size;
	uint64_t zone_cap;
	uint64_t zones;
	uint32_t max_open;
};

/* A zone: the layout of fio's struct zbd_zone (engine.c asserts it). */
struct zf_zone {
	uint64_t start;
	uint64_t wp;
	uint64_t len;
	uint64_t capacity;
	int type;
	int cond;
};

/* One I/O of the submission queue (zf_sq_take). */
struct zf_io {
	uintptr_t tag;
	int kind;
	uint64_t off;
	void *buf;
	uint64_t len;
};

/* The dispatcher takes up to max submitted I/Os (zf_sq_take); it sleeps
 * on the queue's eventfd when zf_sq_idle returns 1, takes more when 0. */
int zf_sq_take(void *sq, struct zf_io *out, int max);
int zf_sq_idle(void *sq);

/*
 * A job's completion queue: goroutines add completed I/Os (main.go
 * complete), the job's thread takes them in getevents (engine.c
 * zf_cq_wait). It holds at most iodepth entries (fio has no more in
 * flight), in a ring of slots with sequence numbers (Vyukov's bounded
 * queue, one consumer): adding a completion takes no lock and no call into
 * C, so a goroutine never waits for the job's thread or another goroutine,
 * and it wakes the thread (futex) only when the thread sleeps and the
 * completions it waits for are there (want).
 */
struct zf_slot {
	uint64_t seq; /* pos+1: completion pos is in it; pos+cap: free for pos+cap */
	uintptr_t tag;
	int err;
};

struct zf_cq {
	struct zf_slot *ring;
	unsigned int cap;
	uint64_t tail;	/* the next completion's position (producers) */
	uint64_t done;	/* completions added */
	uint64_t head;	/* the next position to take (the job's thread only) */
	uint64_t want;	/* the sleeping thread's goal for done (0: not sleeping) */
	uint32_t futex;	/* bumped by a producer that wakes the thread */
	int busy_poll;
};

#endif
