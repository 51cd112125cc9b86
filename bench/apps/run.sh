#!/usr/bin/env bash
# Real applications on a ZoneFleet mount vs go-fuse's loopback over a plain
# directory, in the same run: RocksDB db_bench (fillseq, overwrite,
# readrandom, readwhilewriting; one thread, 400-byte values, as eZNS §5.3
# evaluates with RocksDB) and an sqlite transaction workload (WAL,
# synchronous=FULL: every commit is an fsync). Prints ops/s per target and
# the ratio zonefleet / loopback (1.0 = as fast as the kernel FUSE path over
# a local directory).
#
#   make build                        # bin/zctl
#   apt-get install rocksdb-tools sqlite3
#   sudo bench/apps/run.sh            # FUSE mounts: root, or fusermount3 + user_allow_other
#
# Environment: NUM (db_bench keys, default 200000), SQLITE_TXNS (default 2000),
# SQLITE_ROWS (rows per transaction, default 10), WORK (scratch directory,
# default a new one under /tmp), CLOCK (drive clock of the local cluster:
# realtime (default) or off), ZCTL (default bin/zctl).
set -euo pipefail

cd "$(dirname "$0")/../.."
NUM=${NUM:-200000}
SQLITE_TXNS=${SQLITE_TXNS:-2000}
SQLITE_ROWS=${SQLITE_ROWS:-10}
CLOCK=${CLOCK:-realtime}
ZCTL=${ZCTL:-bin/zctl}
WORK=${WORK:-$(mktemp -d /tmp/zf-apps.XXXXXX)}
DB_BENCH=${DB_BENCH:-$(command -v db_bench || command -v rocksdb_db_bench || true)}

for tool in "$ZCTL" "$DB_BENCH" sqlite3 fusermount3; do
	if [[ -z "$tool" ]] || ! command -v "$tool" >/dev/null; then
		echo "missing tool: ${tool:-db_bench} (make build; apt-get install rocksdb-tools sqlite3 fuse3)" >&2
		exit 2
	fi
done

mkdir -p "$WORK/zf-mnt" "$WORK/lb-mnt" "$WORK/lb-dir"
go build -o "$WORK/loopback" github.com/hanwen/go-fuse/v2/example/loopback

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
"$WORK/loopback" -q "$WORK/lb-mnt" "$WORK/lb-dir" >"$WORK/loopback.log" 2>&1 &
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

for target in zonefleet loopback; do
	dir="$WORK/zf-mnt"
	[[ $target == loopback ]] && dir="$WORK/lb-mnt"
	echo "running on $target ($dir)…" >&2
	run_db_bench "$target" "$dir"
	run_sqlite "$target" "$dir"
	rm -rf "$dir/rocksdb" "$dir"/bench.sqlite*
done

printf '%-18s %16s %16s %8s\n' workload "zonefleet ops/s" "loopback ops/s" ratio
for w in fillseq overwrite readrandom readwhilewriting sqlite_txn; do
	z=${result[zonefleet.$w]:-0} l=${result[loopback.$w]:-0}
	r=$(if [[ $l != 0 ]]; then echo "$z / $l" | bc -l | xargs printf '%.2f'; else echo nan; fi)
	printf '%-18s %16s %16s %8s\n' "$w" "$z" "$l" "$r"
done
echo "(NUM=$NUM keys of 400 bytes, one thread; sqlite: $SQLITE_TXNS transactions of $SQLITE_ROWS rows, WAL, synchronous=FULL; logs in $WORK)"
