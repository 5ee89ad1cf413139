#!/bin/bash
# (docs/benchmarks.md, "A PostgreSQL pay, profiled"; the cluster of cluster.sh.)
# cg.sh SERVER_BIN LABEL [PAYS]: instructions of the server (callgrind) over PAYS new-key pays,
# collection switched on only around them (callgrind_control -i).
set -e
BIN=$1; LABEL=$2; N=${3:-200}; T=$(cd "$(dirname "$0")" && pwd); W=${PGPROFILE_OUT:-/tmp/pgprofile}; mkdir -p $W; DB=cg_$LABEL
PSQL="psql -h 127.0.0.1 -p 5433 -U postgres -qAt"
$PSQL -c "drop database if exists $DB" -c "create database $DB owner root"
rm -f $W/callgrind.$LABEL.*
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$W/callgrind.$LABEL.%p \
  $BIN --dev --addr 127.0.0.1:18083 --database-url postgres://root@127.0.0.1:5433/$DB \
  --session-secret bench-secret-bench-secret-bench-secret-0123 --no-provider-webhooks \
  --replay-cache-entries 0 --jobs-interval-ms 0 --provider-addr 127.0.0.1:0 --provider-memory-only \
  > $W/cg-$LABEL.log 2>&1 &
SPID=$!
for i in $(seq 240); do curl -sf 127.0.0.1:18083/healthz >/dev/null && break; sleep 0.5; done
$PSQL -d $DB -c "update catalog set stock = 1000000000"
python3 $T/drive.py --api 127.0.0.1:18083 -n 40 -c 4 >/dev/null
python3 $T/drive.py --api 127.0.0.1:18083 -n $N -c 4 --before "callgrind_control -i on $SPID >/dev/null" --after "callgrind_control -i off $SPID >/dev/null"
kill $SPID; wait $SPID 2>/dev/null || true
f=$(ls $W/callgrind.$LABEL.* | head -1)
callgrind_annotate --inclusive=no $f 2>/dev/null | head -40 > $W/cg-$LABEL-self.txt
callgrind_annotate --inclusive=yes $f 2>/dev/null | head -80 > $W/cg-$LABEL-incl.txt
grep -m1 "PROGRAM TOTALS" $W/cg-$LABEL-self.txt
