#!/bin/bash
# A private PostgreSQL cluster for profiling a pay (docs/benchmarks.md, "A PostgreSQL pay,
# profiled"): port 5433, pg_stat_statements with planning, trust auth, a superuser `root`.
# Every process of it is the profile's, so its CPU time is the database's cost of the pays
# even on a machine others share. Run as root; the cluster runs as `postgres`.
set -euo pipefail
DIR=${PGPROFILE_DIR:-/tmp/pgprofile}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
mkdir -p "$DIR" && chown postgres "$DIR"
su postgres -c "$BIN/initdb -D $DIR/data -A trust -U postgres" >/dev/null
cat >> "$DIR/data/postgresql.conf" <<CONF
port = 5433
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_planning = on
max_connections = 200
CONF
su postgres -c "$BIN/pg_ctl -D $DIR/data -l $DIR/log start" >/dev/null
psql -h 127.0.0.1 -p 5433 -U postgres -qc "create extension pg_stat_statements" \
  -c "create role root superuser login"
echo "cluster on 127.0.0.1:5433 ($DIR); stop: su postgres -c '$BIN/pg_ctl -D $DIR/data stop'"
