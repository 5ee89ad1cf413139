#!/bin/bash
# rt.sh SERVER_BIN LABEL: messages per new-key pay through the counting proxy rtcount.py
# (5434 -> the private cluster of cluster.sh on 5433), 100 sequential pays after 30 untimed
# ones (every statement prepared on the connections). A round trip is a Sync (S) or a
# simple Query (Q); B/E are the statements with values.
set -e
BIN=$1; LABEL=$2; T=$(cd "$(dirname "$0")" && pwd); W=${PGPROFILE_OUT:-/tmp/pgprofile}; mkdir -p $W; DB=rt_$LABEL
python3 $T/rtcount.py 5434 5433 $W/counts.jsonl & P=$!; sleep 0.5
PSQL="psql -h 127.0.0.1 -p 5433 -U postgres -qAt"
$PSQL -c "drop database if exists $DB" -c "create database $DB owner root"
$BIN --dev --addr 127.0.0.1:18082 --database-url postgres://root@127.0.0.1:5434/$DB \
  --session-secret bench-secret-bench-secret-bench-secret-0123 --no-provider-webhooks \
  --replay-cache-entries 0 --jobs-interval-ms 0 --provider-addr 127.0.0.1:0 --provider-memory-only \
  > $W/rt-$LABEL.log 2>&1 &
SPID=$!
for i in $(seq 50); do curl -sf 127.0.0.1:18082/healthz >/dev/null && break; sleep 0.5; done
$PSQL -d $DB -c "update catalog set stock = 1000000000"
python3 $T/drive.py --api 127.0.0.1:18082 -n 30 -c 1 >/dev/null
python3 $T/drive.py --api 127.0.0.1:18082 -n 100 -c 1 --before "kill -USR1 $P" --after "sleep 1; kill -USR1 $P"
sleep 0.5; kill $SPID; wait $SPID 2>/dev/null || true
kill $P
echo "$LABEL per 100 pays: $(tail -1 $W/counts.jsonl)"
