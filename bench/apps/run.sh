#!/usr/bin/env bash
# Real applications on a ZoneFleet mount vs go-fuse's loopback over a plain
# directory, in the same run: RocksDB db_bench (fillseq, overwrite,
# readrandom, readwhilewriting; one thread, 400-byte values, as eZNS §5.3
# evaluates with RocksDB), an sqlite transaction workload (WAL,
# synchronous=FULL: every commit is an fsync) and fio (sequential 1 MiB write
# and read, random 4 KiB read at QD1 and libaio QD16, random 4 KiB write
# with an fsync every 32). Prints the figure per target and the ratio
# zonefleet / loopback (1.0 = as fast as the kernel FUSE path over a local
# directory).
#
# The loopback is bench/apps/loopback: go-fuse's loopback file system
# WITHOUT FUSE passthrough (every byte goes through its daemon, as on a
# ZoneFleet mount); LOOPBACK_PASSTHROUGH=1 lets the kernel pass reads and
# writes straight to the backing files instead (go-fuse's default as root).
# fio's file (FIO_SIZE, default 1 GiB) is four times lfs's page cache; fio
# drops the kernel's cache of it before each job (invalidate=1), the host
# page cache under both sides stays.
#
#   make build                        # bin/zctl
#   apt-get install rocksdb-tools sqlite3 fio   # a missing tool skips its rows
#   sudo bench/apps/run.sh            # FUSE mounts: root, or fusermount3 + user_allow_other
#
# Environment: NUM (db_bench keys, default 200000), SQLITE_TXNS (default 2000),
# SQLITE_ROWS (rows per transaction, default 10), FIO_SIZE (default 1G),
# FIO_RUNTIME (seconds of each random fio job, default 15), WORK (scratch
# directory, default a new one under /tmp), CLOCK (drive clock of the local
# cluster: realtime (default) or off), ZCTL (default bin/zctl),
# LOOPBACK_PASSTHROUGH (default 0), FIO_JOBS (the fio jobs to run, default
# all: seq_write_1m seq_read_1m rand_read_4k_qd1 rand_read_4k_qd16
# rand_write_4k_fsync32), CREATES (small files the creates workload makes,
# default 20000), SKIP (space-separated workloads not to run: db_bench
# sqlite fio creates).
set -euo pipefail

cd "$(dirname "$0")/../.."
NUM=${NUM:-200000}
SQLITE_TXNS=${SQLITE_TXNS:-2000}
SQLITE_ROWS=${SQLITE_ROWS:-10}
FIO_SIZE=${FIO_SIZE:-1G}
FIO_RUNTIME=${FIO_RUNTIME:-15}
LOOPBACK_PASSTHROUGH=${LOOPBACK_PASSTHROUGH:-0}
CREATES=${CREATES:-20000}
FIO_JOBS=${FIO_JOBS:-seq_write_1m seq_read_1m rand_read_4k_qd1 rand_read_4k_qd16 rand_write_4k_fsync32}
SKIP=${SKIP:-}
CLOCK=${CLOCK:-realtime}
ZCTL=${ZCTL:-bin/zctl}
WORK=${WORK:-$(mktemp -d /tmp/zf-apps.XXXXXX)}
DB_BENCH=${DB_BENCH:-$(command -v db_bench || command -v rocksdb_db_bench || true)}

for tool in "$ZCTL" fusermount3; do
	if ! command -v "$tool" >/dev/null; then
		echo "missing tool: $tool (make build; apt-get install fuse3)" >&2
		exit 2
	fi
done
have() { [[ -n "$1" ]] && command -v "$1" >/dev/null; }
skipped() { [[ " $SKIP " == *" $1 "* ]]; }
wanted() { [[ " $FIO_JOBS " == *" $1 "* ]]; }
for tool in "${DB_BENCH:-db_bench}" sqlite3 fio; do
	have "$tool" || echo "missing $tool: its rows are skipped (apt-get install rocksdb-tools sqlite3 fio)" >&2
done

mkdir -p "$WORK/zf-mnt" "$WORK/lb-mnt" "$WORK/lb-dir"
go build -o "$WORK/loopback" ./bench/apps/loopback
lb_flags=()
[[ $LOOPBACK_PASSTHROUGH == 1 ]] && lb_flags=(-passthrough)

pids=()
cleanup() {
	set +e
	fusermount3 -u "$WORK/lb-mnt" 2>/dev/null || umount -l "$WORK/lb-mnt" 2>/dev/null
	for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

wait_mount() {
	for _ in $(seq 1 600); do
		mountpoint -q "$1" && return 0
		sleep 0.1
	done
	echo "no mount at $1" >&2
	exit 1
}

"$ZCTL" local up --data "$WORK/zf-data" --mount "$WORK/zf-mnt" --clock "$CLOCK" >"$WORK/zctl.log" 2>&1 &
pids+=($!)
"$WORK/loopback" "${lb_flags[@]}" "$WORK/lb-mnt" "$WORK/lb-dir" >"$WORK/loopback.log" 2>&1 &
pids+=($!)
wait_mount "$WORK/zf-mnt"
wait_mount "$WORK/lb-mnt"

declare -A result
# db_bench prints "fillseq      :      12.345 micros/op 81004 ops/sec; ..."
run_db_bench() { # target dir
	local target=$1 dir=$2
	"$DB_BENCH" --db="$dir/rocksdb" --benchmarks=fillseq,overwrite,readrandom,readwhilewriting \
		--num="$NUM" --value_size=400 --key_size=16 --threads=1 --compression_type=none \
		--histogram=0 --statistics=0 >"$WORK/db_bench.$target.log" 2>&1
	while read -r name _ _ _ ops _; do
		result[$target.$name]=$ops
	done < <(grep -E '^(fillseq|overwrite|readrandom|readwhilewriting) +:' "$WORK/db_bench.$target.log" |
		sed -E 's/^([a-z]+) +: +([0-9.]+) micros\/op ([0-9]+) ops\/sec.*/\1 : \2 micros \3 ops/')
}

# sqlite: SQLITE_TXNS transactions of SQLITE_ROWS inserts each, WAL with
# synchronous=FULL (a commit returns after fsync), then one random read per
# transaction's worth of rows.
run_sqlite() { # target dir
	local target=$1 dir=$2 db=$2/bench.sqlite
	rm -f "$db" "$db-wal" "$db-shm"
	{
		echo "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
		echo "CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB);"
	} | sqlite3 "$db" >/dev/null
	local sql="$WORK/txns.sql"
	if [[ ! -f "$sql" ]]; then
		{
			echo "PRAGMA synchronous=FULL;"
			for ((t = 0; t < SQLITE_TXNS; t++)); do
				echo "BEGIN;"
				for ((r = 0; r < SQLITE_ROWS; r++)); do
					echo "INSERT INTO kv(v) VALUES(randomblob(400));"
				done
				echo "COMMIT;"
			done
		} >"$sql"
	fi
	local t0 t1
	t0=$(date +%s.%N)
	sqlite3 "$db" <"$sql" >/dev/null
	t1=$(date +%s.%N)
	result[$target.sqlite_txn]=$(echo "$SQLITE_TXNS / ($t1 - $t0)" | bc -l | xargs printf '%.0f')
}

# creates: CREATES files of 1 KiB each (open O_CREAT, write, close; 100
# per directory), files per second; no fsync, the time includes a final
# sync(2) of the mount (syncfs).
run_creates() { # target dir
	local target=$1 dir=$2/creates
	rm -rf "$dir"
	result[$target.creates_1k]=$(python3 -c '
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
buf = b"x" * 1024
t0 = time.monotonic()
for i in range(n):
    sub = os.path.join(d, "d%04d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(sub)
    fd = os.open(os.path.join(sub, "f%d" % i), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, buf)
    os.close(fd)
fd = os.open(d, os.O_RDONLY)
os.fsync(fd)  # the directory; then the whole mount
os.close(fd)
os.sync()
print("%.0f" % (n / (time.monotonic() - t0)))' "$dir" "$CREATES")
	rm -rf "$dir"
}

# fio: MiB/s for the sequential jobs, IOPS for the random ones; fio's own
# JSON output of every job goes to $WORK/fio.TARGET.json.
fio_job() { # target dir name args...
	local target=$1 dir=$2 name=$3
	shift 3
	fio --name="$name" --filename="$dir/fio.dat" --size="$FIO_SIZE" --output-format=json "$@" \
		>"$WORK/fio.$target.$name.json" 2>>"$WORK/fio.$target.log" || return 0
	cat "$WORK/fio.$target.$name.json" >>"$WORK/fio.$target.json"
	result[$target.fio_$name]=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
rw = j["read"] if j["read"]["io_bytes"] else j["write"]
print("%.1f" % (rw["bw"] / 1024) if sys.argv[2] == "seq" else "%.0f" % rw["iops"])' \
		"$WORK/fio.$target.$name.json" "${name%%_*}")
}
run_fio() { # target dir
	local target=$1 dir=$2
	rm -f "$dir/fio.dat"
	! wanted seq_write_1m || fio_job "$target" "$dir" seq_write_1m --rw=write --bs=1M --ioengine=psync --end_fsync=1
	! wanted seq_read_1m || fio_job "$target" "$dir" seq_read_1m --rw=read --bs=1M --ioengine=psync
	! wanted rand_read_4k_qd1 || fio_job "$target" "$dir" rand_read_4k_qd1 --rw=randread --bs=4k --ioengine=psync --runtime="$FIO_RUNTIME" --time_based
	! wanted rand_read_4k_qd16 || fio_job "$target" "$dir" rand_read_4k_qd16 --rw=randread --bs=4k --ioengine=libaio --iodepth=16 --runtime="$FIO_RUNTIME" --time_based
	! wanted rand_write_4k_fsync32 || fio_job "$target" "$dir" rand_write_4k_fsync32 --rw=randwrite --bs=4k --ioengine=psync --fsync=32 --runtime="$FIO_RUNTIME" --time_based
	rm -f "$dir/fio.dat"
}

for target in zonefleet loopback; do
	dir="$WORK/zf-mnt"
	[[ $target == loopback ]] && dir="$WORK/lb-mnt"
	echo "running on $target ($dir)…" >&2
	if have "$DB_BENCH" && ! skipped db_bench; then run_db_bench "$target" "$dir"; fi
	if have sqlite3 && ! skipped sqlite; then run_sqlite "$target" "$dir"; fi
	if have fio && ! skipped fio; then run_fio "$target" "$dir"; fi
	if ! skipped creates; then run_creates "$target" "$dir"; fi
	rm -rf "$dir/rocksdb" "$dir"/bench.sqlite*
done

printf '%-22s %16s %16s %8s\n' workload "zonefleet" "loopback" ratio
for w in fillseq overwrite readrandom readwhilewriting sqlite_txn creates_1k \
	fio_seq_write_1m fio_seq_read_1m fio_rand_read_4k_qd1 fio_rand_read_4k_qd16 fio_rand_write_4k_fsync32; do
	z=${result[zonefleet.$w]:-0} l=${result[loopback.$w]:-0}
	r=$(if [[ $l != 0 ]]; then echo "$z / $l" | bc -l | xargs printf '%.2f'; else echo nan; fi)
	printf '%-22s %16s %16s %8s\n' "$w" "$z" "$l" "$r"
done
echo "(ops/s; creates_1k: files/s; fio_seq_*: MiB/s, fio_rand_*: IOPS; loopback: bench/apps/loopback, passthrough=$LOOPBACK_PASSTHROUGH)"
echo "(NUM=$NUM keys of 400 bytes, one thread; sqlite: $SQLITE_TXNS transactions of $SQLITE_ROWS rows, WAL, synchronous=FULL; logs in $WORK)"
