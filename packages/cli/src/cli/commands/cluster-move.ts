import type { Command } from 'commander';
import { MOVE_PHASES } from 'shardflake/internal/catalog/moves.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { checkPrivileges } from 'shardflake/internal/fence/privileges.js';
import { checkShardList } from 'shardflake/internal/move/checks.js';
import { cleanupCluster } from 'shardflake/internal/move/cleanup.js';
import { parseThrottle } from 'shardflake/internal/move/copy-stream.js';
import { moveShards } from 'shardflake/internal/move/move.js';
import {
  type MoveOptions,
  type MoveResult,
  type MoveStep,
  type SetMoveOptions,
  VERIFY_MODES,
  type VerifyMode,
} from 'shardflake/internal/move/options.js';
import { BALANCE_BY, type BalanceBy, rebalanceCluster } from 'shardflake/internal/move/rebalance.js';
import { positiveInteger } from './options.js';
import { progressBar, toJson } from './output.js';

interface Flags {
  config: string;
  json?: boolean;
}

interface MoveFlags {
  replicationUser?: string;
  replicationPassfile?: string;
  throttle?: string;
  copyWorkers?: number;
  streamsPerServer?: number;
  pauseBound?: number;
  replicaFenceTimeout?: number;
  skipReplica?: string;
}

/** The flags every command that moves shards shares, as set options. */
function setOptions(flags: MoveFlags): SetMoveOptions {
  return {
    throttle: flags.throttle === undefined ? undefined : parseThrottle(flags.throttle),
    copyWorkers: flags.copyWorkers,
    streamsPerServer: flags.streamsPerServer,
    pauseBoundMs: flags.pauseBound,
    replicaFenceTimeoutMs: flags.replicaFenceTimeout,
    skipReplicas: flags.skipReplica?.split(',').map((r) => r.trim()),
    afterStep: holdHook(),
    replication: { user: flags.replicationUser, passfile: flags.replicationPassfile },
  };
}

/** Parses `--shard 3` or `--shard 3,4,10`. */
export function parseShardList(value: string): number[] {
  const parts = value.split(',').map((p) => p.trim());
  const shards = parts.map((p) => (/^\d+$/.test(p) ? Number(p) : Number.NaN));
  if (parts.length === 0 || shards.some((n) => !Number.isSafeInteger(n))) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--shard must be a shard number or a comma-separated list, not ${JSON.stringify(value)}`,
    );
  }
  if (new Set(shards).size !== shards.length) {
    throw new ShardflakeError('INVALID_ARGUMENT', `--shard lists a shard twice: ${value}`);
  }
  return shards;
}

function parseVerifyMode(value: string): VerifyMode {
  if (!(VERIFY_MODES as readonly string[]).includes(value)) {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `--verify must be one of ${VERIFY_MODES.join(', ')}, not ${JSON.stringify(value)}`,
    );
  }
  return value as VerifyMode;
}

/**
 * Test hook for killing a real process at a chosen step: with SHARDFLAKE_MOVE_HOLD_AFTER=<step> the command
 * prints `holding after <step>` on stderr when it gets there and waits until it is killed.
 */
function holdHook(): MoveOptions['afterStep'] {
  const step = process.env.SHARDFLAKE_MOVE_HOLD_AFTER;
  if (!step) return undefined;
  if (![...MOVE_PHASES, 'cutover-locked'].includes(step)) {
    throw new ShardflakeError('INVALID_ARGUMENT', `SHARDFLAKE_MOVE_HOLD_AFTER=${step} is not a move step`);
  }
  return async (at: MoveStep) => {
    if (at !== step) return;
    process.stderr.write(`holding after ${at}\n`);
    await new Promise(() => {});
  };
}

const ms = (n: number | null) => (n === null ? '—' : `${n.toFixed(0)} ms`);

function describeMove(r: MoveResult): string {
  const speed =
    r.rowsPerSecond === null
      ? 'copied by an earlier run'
      : `${r.rowsPerSecond.toLocaleString('en-US')} rows/s${r.batchId != null ? ' (the whole set)' : ''}`;
  const set = r.batchId != null ? ` in set #${r.batchId}` : '';
  return [
    `moved shard ${r.shard} (${r.schema}) from ${r.from} to ${r.to}: move #${r.moveId}${set}${r.resumedFrom ? `, resumed after ${r.resumedFrom}` : ''}`,
    `  ${r.rows} rows in ${r.tables} tables verified (count + checksum); copy ${speed}; writes paused ${ms(r.pauseMs)}; map version ${r.mapVersion}`,
    `  the old copy on ${r.from} is fenced (writes fail with SF001) until shardflake cluster cleanup drops it`,
  ].join('\n');
}

/**
 * The flags `cluster move` and `cluster rebalance` share (MoveFlags); a rebalance moves several sets, so its help
 * says "per set" where it matters.
 */
function withMoveFlags(command: Command, name: 'move' | 'rebalance'): Command {
  const perSet = name === 'rebalance';
  return command
    .option(
      '--throttle <rate>',
      perSet
        ? "limit each set's initial copy: 5000rows/s, 20MB/s, …"
        : 'limit the initial copy: 5000rows/s, 20MB/s, …',
    )
    .option(
      '--copy-workers <n>',
      `tables copied at once${perSet ? ' per set' : ''} (default 4)`,
      positiveInteger('--copy-workers'),
    )
    .option(
      '--replication-user <role>',
      "the source role the subscription logs in as (default: the URL's user)",
    )
    .option('--replication-passfile <path>', "a passfile on the target's host holding that role's password")
    .option(
      '--streams-per-server <n>',
      `sets at once on any one server (default 1)${perSet ? '; distinct server pairs move in parallel' : ''}`,
      positiveInteger('--streams-per-server'),
    )
    .option(
      '--pause-bound <ms>',
      'longest a frozen or vanished mover can keep writes paused: its sessions end after this (default 10000)',
      positiveInteger('--pause-bound'),
    )
    .option(
      '--replica-fence-timeout <ms>',
      "longest wait for the source's replicas to replay the fence before the switch; past it the move rolls back (default 5000)",
      positiveInteger('--replica-fence-timeout'),
    )
    .option(
      '--skip-replica <host:port[,…]>',
      'replicas of the source declared out (gone for good): not waited for at the switch',
    );
}

/** `cluster move`, `cluster rebalance` and `cluster cleanup`, registered under the `cluster` command by cluster.ts. */
export function registerMoveCommands(cluster: Command): void {
  const move = cluster
    .command('move')
    .description(
      'move logical shards to another server while the application writes (logical replication, verified cutover); rerun to resume an interrupted move',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .requiredOption(
      '--shard <n[,m…]>',
      'shard number(s) to move; several move together as one set per source server',
    )
    .requiredOption('--to <server>', 'server name from the config')
    .option(
      '--verify <mode>',
      `where the copies are compared row by row: ${VERIFY_MODES.join(' | ')} (in-pause: in the write pause; snapshots: on snapshots pinned in a ~10 ms pause, for big shards)`,
      'in-pause',
    );
  withMoveFlags(move, 'move')
    .option('--json', 'print the results as JSON')
    .action(async (flags: Flags & MoveFlags & { shard: string; to: string; verify: string }) => {
      const shards = parseShardList(flags.shard);
      const verify = parseVerifyMode(flags.verify);
      const options = setOptions(flags);
      const config = await loadConfig(flags.config);
      checkShardList(config, shards, flags.to);
      await checkPrivileges(config, 'move');
      const bar = progressBar('move   ', !flags.json);
      const results = await moveShards(config, shards, flags.to, {
        ...options,
        verify,
        onSetProgress: (p) => bar.update(p.done, p.total),
        onProgress: (p) => {
          if (p.phase === 'copying' && p.totalRows > 0n)
            bar.update(Number(p.copiedRows), Number(p.totalRows));
        },
      }).finally(() => bar.stop());
      if (flags.json) process.stdout.write(`${toJson({ moves: results })}\n`);
      else process.stdout.write(`${results.map(describeMove).join('\n')}\n`);
    });

  const rebalance = cluster
    .command('rebalance')
    .description(
      'spread the logical shards evenly over the servers in the config (e.g. after adding one), or empty a server with --decommission',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option(
      '--by <what>',
      `what to even out: ${BALANCE_BY.join(' | ')} (rows: live-row estimates; bytes: size on disk; weight: --weight-sql)`,
      'shards',
    )
    .option(
      '--weight-sql <sql>',
      "a shard's weight: one SELECT run in each shard schema (its only search_path), returning one number; trusted input, run as the config's role (docs/security.md)",
    )
    .option('--decommission <server[,server…]>', 'move every shard off these servers (they receive none)')
    .option('--dry-run', 'print the plan without moving anything');
  withMoveFlags(rebalance, 'rebalance')
    .option('--json', 'print the plan and results as JSON')
    .action(
      async (
        flags: Flags &
          MoveFlags & { dryRun?: boolean; by: string; weightSql?: string; decommission?: string },
      ) => {
        if (!(BALANCE_BY as readonly string[]).includes(flags.by)) {
          throw new ShardflakeError(
            'INVALID_ARGUMENT',
            `--by must be one of ${BALANCE_BY.join(', ')}, not ${JSON.stringify(flags.by)}`,
          );
        }
        const config = await loadConfig(flags.config);
        if (!flags.dryRun) await checkPrivileges(config, 'rebalance');
        const bar = progressBar('rebalance', !flags.json && !flags.dryRun);
        const move = setOptions(flags);
        const result = await rebalanceCluster(config, {
          by: flags.weightSql !== undefined ? 'weight' : (flags.by as BalanceBy),
          weightSql: flags.weightSql,
          decommission: flags.decommission?.split(',').map((d) => d.trim()),
          dryRun: flags.dryRun,
          move,
          onProgress: (done, total) => bar.update(done, total),
        }).finally(() => bar.stop());
        if (flags.json) {
          process.stdout.write(`${toJson(result)}\n`);
          return;
        }
        const counts = (c: Record<string, number>) =>
          Object.entries(c)
            .map(([s, n]) => `${s}=${n}`)
            .join(' ');
        const lines = [
          `shards per server now: ${counts(result.before)}; after: ${counts(result.after)}`,
          ...(result.weightBefore && result.weightAfter
            ? [
                `${{ rows: 'rows (estimated)', bytes: 'bytes on disk', weight: 'weight (--weight-sql)', shards: '' }[result.by]} per server now: ${counts(result.weightBefore)}; after: ${counts(result.weightAfter)}`,
              ]
            : []),
          ...(result.decommission.length > 0
            ? [`decommissioning ${result.decommission.join(', ')}: every shard leaves`]
            : []),
          result.moves.length === 0
            ? ''
            : result.estimate?.thin
              ? `estimated time between ${result.estimate.low} and ${result.estimate.high} s for ${result.moves.length} shards and ~${result.rowsToCopy} rows (only ${result.estimate.fromSets} earlier sets or moves measured, or none as large: the range their rates allow)`
              : result.estimate
                ? `estimated time ${result.estimate.seconds} s for ${result.moves.length} shards and ~${result.rowsToCopy} rows (${result.estimate.secondsPerShard} s per shard${result.estimate.rowsPerSecond > 0 ? ` + rows at ${result.estimate.rowsPerSecond} rows/s` : ''}, fitted on ${result.estimate.fromSets} earlier sets or moves)`
                : `no earlier move measured in this cluster: no time estimate yet (~${result.rowsToCopy} rows to copy)`,
          result.moves.length === 0
            ? 'already balanced: nothing to move'
            : `${result.dryRun ? 'plan' : 'moved'} (${result.moves.length}):`,
          ...result.moves.map((m) => `  shard ${m.shard}: ${m.from} -> ${m.to}`),
        ];
        if (!result.dryRun && result.results.length > 0) {
          const paused = Math.max(...result.results.map((r) => r.pauseMs ?? 0));
          const rows = result.results.reduce((n, r) => n + r.rows, 0n);
          lines.push(
            `  ${rows} rows verified; longest write pause ${ms(paused)}; run shardflake cluster cleanup to drop the old copies`,
          );
        }
        process.stdout.write(`${lines.filter((l) => l !== '').join('\n')}\n`);
      },
    );

  cluster
    .command('cleanup')
    .description(
      'settle interrupted moves, drop fenced old copies of moved shards and any leftover replication slot, publication or subscription',
    )
    .requiredOption('--config <file>', 'cluster config (JSON)')
    .option('--dry-run', 'list what would be dropped')
    .option('--json', 'print the result as JSON')
    .action(async (flags: Flags & { dryRun?: boolean }) => {
      const config = await loadConfig(flags.config);
      if (!flags.dryRun) await checkPrivileges(config, 'cleanup');
      const result = await cleanupCluster(config, { dryRun: flags.dryRun });
      if (flags.json) {
        process.stdout.write(`${toJson(result)}\n`);
        return;
      }
      const verb = flags.dryRun ? 'would drop' : 'dropped';
      process.stdout.write(
        [
          ...result.settled.map(
            (s) => `move #${s.moveId} of shard ${s.shard}: ${s.outcome.replace('_', ' ')}`,
          ),
          ...result.droppedCopies.map(
            (c) =>
              `${verb} ${c.fenced ? 'fenced old copy' : 'leftover copy'} ${c.schema} of shard ${c.shard} on ${c.server}`,
          ),
          ...result.fencedOnDiscovery.map(
            (c) => `fenced writable leftover copy ${c.schema} of shard ${c.shard} on ${c.server}`,
          ),
          ...result.conflicts.map(
            (c) =>
              `kept ${c.schema} of shard ${c.shard} on ${c.server}: it changed after move #${c.moveId} fenced it (${c.differences.join('; ')}); reconcile ${c.rowsToReconcile.length > 0 ? c.rowsToReconcile.join(', ') : 'its rows'} with the shard's home, then drop it by hand`,
          ),
          ...result.droppedReplication.map((r) => `${verb} ${r.kind} ${r.name} on ${r.server}`),
          ...result.skipped.map((s) => `skipped: ${s}`),
          result.settled.length +
            result.droppedCopies.length +
            result.droppedReplication.length +
            result.fencedOnDiscovery.length +
            result.conflicts.length ===
          0
            ? result.skipped.length > 0
              ? 'nothing cleaned up on the servers reached; run again once the skipped ones answer'
              : 'nothing to clean up'
            : '',
        ]
          .filter((l) => l !== '')
          .join('\n')
          .concat('\n'),
      );
    });
}
