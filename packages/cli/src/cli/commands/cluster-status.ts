import type { Command } from 'commander';
import { type ClusterStatus, clusterStatus } from 'shardflake/internal/admin/status.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { checkPrivileges } from 'shardflake/internal/fence/privileges.js';
import { positiveInteger } from './options.js';
import { toJson } from './output.js';

/** `shardflake cluster status`: the library's clusterStatus, printed as text or JSON, once or every N seconds. */
export function registerStatusCommand(cluster: Command): void {
  cluster
    .command('status')
    .description(
      'the shard map, shards per server with rows, size and activity, nodes with connections and replica lag',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--json', 'print the status as JSON')
    .option('--shards', 'list every shard with its rows, size and activity')
    .option('--watch [seconds]', 'refresh every N seconds on a terminal (default 2)')
    .action(async (flags: { config: string; json?: boolean; shards?: boolean; watch?: string | boolean }) => {
      // A bad --watch is refused before anything is read, also when it would be ignored (not a terminal).
      const everyMs =
        flags.watch === undefined || flags.watch === true
          ? 2000
          : 1000 * positiveInteger('--watch')(String(flags.watch));
      const config = await loadConfig(flags.config);
      await checkPrivileges(config, 'status', { servers: [] });
      const render = (status: ClusterStatus) =>
        flags.json ? `${toJson(status)}\n` : formatStatus(status, flags.shards === true);
      if (flags.watch === undefined || !process.stdout.isTTY) {
        process.stdout.write(render(await clusterStatus(config)));
        return;
      }
      for (;;) {
        const text = render(await clusterStatus(config));
        // clear the screen and home the cursor, then draw; Ctrl-C ends the command
        process.stdout.write(
          `\x1b[2J\x1b[H${new Date().toISOString()}  (every ${everyMs / 1000} s)\n${text}`,
        );
        await new Promise((resolve) => setTimeout(resolve, everyMs));
      }
    });
}

const SIZE_UNITS = ['B', 'kB', 'MB', 'GB', 'TB'];
function size(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return '?';
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < SIZE_UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${SIZE_UNITS[unit]}`;
}

const sum = (values: (number | null | undefined)[]) => values.reduce<number>((a, v) => a + (v ?? 0), 0);

export function formatStatus(status: ClusterStatus, everyShard: boolean): string {
  const versions = Object.entries(status.schemaVersions)
    .map(([v, n]) => `v${v}: ${n}`)
    .join(', ');
  const states = status.shards.filter((s) => s.state !== 'active');
  const lines = [
    `map version ${status.version}: ${status.mappedShards} of ${status.logicalShards} logical shards mapped`,
    `layout ${status.layout}, epoch ${status.epoch}`,
    `ids fit a signed bigint until ${status.signedOverflowAt ?? 'the time field runs out'}; time field runs out ${status.exhaustsAt}`,
    `schema versions (target v${status.targetSchemaVersion}): ${versions || 'none'}`,
    'servers:',
  ];
  for (const s of status.servers) {
    const mine = status.shards.filter((x) => x.server === s.name);
    lines.push(
      `  ${s.name.padEnd(8)} ${String(s.shards).padStart(5)} shards  ${s.reachable ? 'reachable  ' : 'UNREACHABLE'}  ${s.url}`,
    );
    if (s.reachable) {
      lines.push(
        `           rows ~${sum(mine.map((x) => x.rows))}, ${size(sum(mine.map((x) => x.bytes)))}; since stats reset: ${sum(mine.map((x) => x.inserts))} inserts, ${sum(mine.map((x) => x.updates))} updates, ${sum(mine.map((x) => x.deletes))} deletes`,
      );
    }
    for (const n of s.nodes) {
      const lag =
        n.role === 'replica' ? `, lag ${size(n.lagBytes)} / ${n.lagSeconds?.toFixed(1) ?? '?'} s` : '';
      lines.push(
        n.reachable
          ? `           ${(n.role ?? '').padEnd(7)} ${n.node}: ${n.connections}/${n.maxConnections} connections (${n.activeConnections} active)${lag}`
          : `           UNREACHABLE ${n.node}`,
      );
    }
  }
  if (states.length > 0) lines.push(`not active: ${states.map((s) => `${s.shard} (${s.state})`).join(', ')}`);
  for (const s of status.shards.filter((x) => x.lastError))
    lines.push(`  shard ${s.shard}: last migration failed: ${s.lastError}`);
  for (const m of status.moves?.unfinished ?? [])
    lines.push(
      `move #${m.moveId} of shard ${m.shard}: ${m.from} → ${m.to}, phase ${m.phase}, ${m.abandoned ? 'abandoned (no process holds it)' : `running (${m.owner ?? 'unknown owner'})`}`,
    );
  for (const l of status.moves?.leftovers ?? [])
    lines.push(
      `leftover copy ${l.schema} of shard ${l.shard} on ${l.role} ${l.node} (server ${l.server}): ${l.fenced ? 'fenced' : 'NOT fenced'}`,
    );
  if (everyShard) {
    lines.push('shard   server    rows      size  inserts  updates  deletes');
    for (const s of status.shards) {
      lines.push(
        `${String(s.shard).padEnd(7)} ${s.server.padEnd(8)} ${String(s.rows ?? '?').padStart(5)} ${size(s.bytes).padStart(9)} ${String(s.inserts ?? '?').padStart(8)} ${String(s.updates ?? '?').padStart(8)} ${String(s.deletes ?? '?').padStart(8)}`,
      );
    }
  }
  const tx = status.transactions;
  if (tx) {
    const cannot = tx.cannotTakePart.length
      ? `; cannot take part (max_prepared_transactions = 0): ${tx.cannotTakePart.join(', ')}`
      : '';
    lines.push(`transactions across servers: ${tx.inDoubt.length} prepared in doubt${cannot}`);
    for (const g of tx.inDoubt)
      lines.push(
        `  ${g.gid} on ${g.server}: ${(g.ageMs / 1000).toFixed(1)} s old, decision ${g.decision} (on ${g.decisionServer})`,
      );
  }
  const point = status.lastRestorePoint;
  if (point) {
    const lsns = Object.entries(point.lsns)
      .map(([server, lsn]) => `${server} ${lsn}`)
      .join(', ');
    lines.push(
      point.state === 'taken'
        ? `last restore point: ${point.name}, taken ${point.takenAt} (${lsns})`
        : point.state === 'taking'
          ? `last restore point: ${point.name}, being taken since ${point.startedAt} (or this catalog was restored to it)`
          : `last restore point: ${point.name}, PARTIAL (written on ${lsns || 'no server'}): never restore to it`,
    );
  } else lines.push('last restore point: none');
  const dl = status.deadlocks;
  if (dl && dl.kept > 0) {
    lines.push(
      `deadlocks across servers broken: ${dl.lastDay} in the last day, ${dl.kept} in the last 7 days`,
    );
    for (const d of dl.latest.slice(0, 3))
      lines.push(
        `  ${d.at}: victim ${d.victim} on ${d.servers.join(', ')} (${d.sessions} sessions, waited ${d.waitedMs} ms)`,
      );
  }
  lines.push(...status.warnings.map((w) => `warning: ${w}`), '');
  return lines.join('\n');
}
