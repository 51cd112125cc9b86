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

/* One I/O of a batch (zf_submit_batch). */
struct zf_io {
	uintptr_t tag;
	int kind;
	uint64_t off;
	void *buf;
	uint64_t len;
};

/* Go hands a completed I/O to the job's completion queue (engine.c). */
void zf_complete(void *cq, uintptr_t tag, int err);

#endif
