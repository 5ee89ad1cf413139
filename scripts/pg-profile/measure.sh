#!/bin/bash
# (docs/benchmarks.md, "A PostgreSQL pay, profiled"; the cluster of cluster.sh.)
# measure.sh SERVER_BIN LABEL [PAYS] [CLIENTS]: CPU per pay of the server and of the private
# PostgreSQL cluster (port 5433, every process of it is this measurement's), pg_stat_statements
# per statement, throughput and p99 from drive.py.
set -e
BIN=$1; LABEL=$2; N=${3:-2000}; C=${4:-16}
T=$(cd "$(dirname "$0")" && pwd); W=${PGPROFILE_OUT:-/tmp/pgprofile}; mkdir -p $W; OUT=$W/out-$LABEL; mkdir -p $OUT
DB=m_$LABEL
PSQL="psql -h 127.0.0.1 -p 5433 -U postgres -qAt"
$PSQL -c "drop database if exists $DB" -c "create database $DB owner root"
$BIN --dev --addr 127.0.0.1:18081 --database-url postgres://root@127.0.0.1:5433/$DB \
  --session-secret bench-secret-bench-secret-bench-secret-0123 --no-provider-webhooks \
  --replay-cache-entries 0 --jobs-interval-ms 0 --provider-addr 127.0.0.1:0 --provider-memory-only \
  > $OUT/server.log 2>&1 &
SPID=$!
for i in $(seq 50); do curl -sf 127.0.0.1:18081/healthz >/dev/null && break; sleep 0.5; done
$PSQL -d $DB -c "update catalog set stock = 1000000000"
python3 $T/drive.py --api 127.0.0.1:18081 -n 64 -c $C > $OUT/warm.json
PM=$(head -1 ${PGPROFILE_DIR:-/tmp/pgprofile}/data/postmaster.pid)
python3 $T/drive.py --api 127.0.0.1:18081 -n $N -c $C \
  --before "$PSQL -c 'select pg_stat_statements_reset()' >/dev/null; uptime > $OUT/uptime; awk '{print \$14+\$15}' /proc/$SPID/stat > $OUT/cpu0; for p in $PM \$(pgrep -P $PM); do awk '{print \$14+\$15}' /proc/\$p/stat; done | paste -sd+ | bc >> $OUT/cpu0" \
  --after "awk '{print \$14+\$15}' /proc/$SPID/stat > $OUT/cpu1; for p in $PM \$(pgrep -P $PM); do awk '{print \$14+\$15}' /proc/\$p/stat; done | paste -sd+ | bc >> $OUT/cpu1; uptime >> $OUT/uptime" \
  > $OUT/run.json
kill $SPID; wait $SPID 2>/dev/null || true
TCK=$(getconf CLK_TCK)
python3 - $OUT $N $TCK <<'PY'
import sys, json
out, n, tck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = [int(x) for x in open(out+'/cpu0').read().split()]
b = [int(x) for x in open(out+'/cpu1').read().split()]
r = json.load(open(out+'/run.json'))
srv = (b[0]-a[0]) / tck / n * 1000; pg = (b[1]-a[1]) / tck / n * 1000
r.update(server_cpu_ms=round(srv, 3), pg_cpu_ms=round(pg, 3), total_cpu_ms=round(srv+pg, 3))
print(json.dumps(r)); json.dump(r, open(out+'/summary.json', 'w'))
PY
$PSQL -F ' | ' -c "select calls, round((total_exec_time/calls)::numeric,3) mean_exec_ms, round((total_plan_time/greatest(calls,1))::numeric,3) mean_plan_ms, round(total_exec_time::numeric,1) total_exec_ms, left(regexp_replace(query, '\s+', ' ', 'g'), 90) from pg_stat_statements where dbid = (select oid from pg_database where datname='$DB') order by total_exec_time desc" > $OUT/statements.txt
cat $OUT/statements.txt
cat $OUT/uptime
