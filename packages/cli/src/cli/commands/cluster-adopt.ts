import type { Command } from 'commander';
import {
  abortAdoption,
  adoptionStatus,
  cutoverRequest,
  planAdoption,
  requireAdoptSection,
  runAdoption,
} from 'shardflake/internal/adopt/adopt.js';
import type { AdoptRunOptions, AdoptRunResult } from 'shardflake/internal/adopt/run.js';
import type { AdoptStatus } from 'shardflake/internal/adopt/status.js';
import { loadConfig } from 'shardflake/internal/config/config.js';
import { ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { describeUrl } from 'shardflake/internal/postgres/connect.js';
import { positiveInteger } from './options.js';
import { phasedProgress, toJson } from './output.js';

/**
 * `shardflake cluster adopt plan|run|cutover|status|abort` (SPEC §I): thin over src/adopt/. docs/adopt.md is the
 * walk-through.
 */
const ADOPT_STEPS = ['created', 'copied', 'applied', 'verified', 'fenced', 'switched'];

/**
 * Test hook for killing a real process at a chosen step: with SHARDFLAKE_ADOPT_HOLD_AFTER=<step> the command prints
 * `holding after <step>` on stderr when it gets there and waits until it is killed (`table:<name>`: after that
 * table's copy, the others not copied yet).
 */
function holdHook(): AdoptRunOptions['afterStep'] {
  const step = process.env.SHARDFLAKE_ADOPT_HOLD_AFTER;
  if (!step) return undefined;
  if (!ADOPT_STEPS.includes(step) && !step.startsWith('table:'))
    throw new ShardflakeError('INVALID_ARGUMENT', `SHARDFLAKE_ADOPT_HOLD_AFTER=${step} is not an adopt step`);
  return async (at: string) => {
    if (at !== step) return;
    process.stderr.write(`holding after ${at}\n`);
    await new Promise(() => {});
  };
}

/** `a=postgres://…,b=postgres://…` → { a: url, b: url }. */
export function parseServerList(value: string): Record<string, string> {
  const servers: Record<string, string> = {};
  for (const part of value.split(/,(?=[A-Za-z0-9_-]+=)/)) {
    const at = part.indexOf('=');
    const name = part.slice(0, at).trim();
    const url = part.slice(at + 1).trim();
    if (at <= 0 || !/^[A-Za-z0-9_-]{1,63}$/.test(name) || !/^postgres(ql)?:\/\//.test(url))
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        '--servers must be NAME=postgres://…[,NAME=postgres://…], names of letters, digits, _ or -',
      );
    if (name in servers)
      throw new ShardflakeError('INVALID_ARGUMENT', `--servers names server ${name} twice`);
    servers[name] = url;
  }
  return servers;
}

/**
 * A URL as the printed config holds it: a literal password becomes `${VARIABLE}` (never printed), and the variable
 * is named on stderr so the reader sets it before adopt run.
 */
function withoutLiteralPassword(url: string, variable: string, moved: string[]): string {
  try {
    const parsed = new URL(url);
    if (!parsed.password || parsed.password.startsWith('%24%7B') || parsed.password.startsWith('${'))
      return url;
    parsed.password = 'PASSWORD_PLACEHOLDER';
    moved.push(variable);
    return parsed.toString().replace('PASSWORD_PLACEHOLDER', `\${${variable}}`);
  } catch {
    return url;
  }
}

function formatRun(r: AdoptRunResult): string {
  const lines = [`adopt run: ${r.phase}`];
  const copied = Object.entries(r.copied);
  if (copied.length > 0)
    lines.push(
      `  copied ${copied.map(([t, n]) => `${t} ${n}`).join(', ')} rows in ${((r.copyMs ?? 0) / 1000).toFixed(1)} s`,
    );
  lines.push(`  changes applied from the source: ${r.changesApplied}`);
  if (r.cutover)
    lines.push(
      `  cut over: verified (pinned in ${r.cutover.verifyPauseMs.toFixed(0)} ms, compared in ${r.cutover.verifyMs.toFixed(0)} ms), writes paused ${r.cutover.pauseMs.toFixed(0)} ms, map version ${r.cutover.mapVersion}`,
      '  the source is fenced (writes fail with SF001); the router serves every table from the shards',
    );
  lines.push(`  ids below ${r.oldIdsBelow} are the source's old ids`);
  return `${lines.join('\n')}\n`;
}

function formatStatus(s: AdoptStatus | null): string {
  if (!s) return 'no adoption recorded in this cluster\n';
  const mb = (b: bigint | null) => (b === null ? '—' : `${(Number(b) / 1e6).toFixed(1)} MB`);
  const lines = [
    `adoption of ${s.source} (root ${s.root}): ${s.phase}${s.running ? ' (adopt run is running)' : ''}`,
    ...s.tables.map(
      (t) =>
        `  ${t.name.padEnd(20)} ${t.kind.padEnd(9)} ${String(t.rowsCopied).padStart(10)} / ~${t.rowsEstimate} rows${t.copied ? '  copied' : ''}`,
    ),
    `  behind: ${mb(s.behindBytes)}${s.behindSeconds === null ? '' : `, ${s.behindSeconds.toFixed(1)} s`}; WAL held on the source: ${mb(s.heldBytes)} of ${mb(BigInt(s.maxSlotWalBytes))}${s.walStatus ? ` (${s.walStatus})` : ''}`,
  ];
  if (s.etaSeconds !== null) lines.push(`  ETA: ${s.etaSeconds.toFixed(0)} s`);
  if (s.pauseMs !== null) lines.push(`  cutover write pause: ${s.pauseMs.toFixed(0)} ms`);
  if (s.lastError) lines.push(`  last error: ${s.lastError}`);
  return `${lines.join('\n')}\n`;
}

export function registerAdoptCommands(cluster: Command): void {
  const adopt = cluster
    .command('adopt')
    .description('take one live PostgreSQL database to shards while it serves traffic (docs/adopt.md)');

  adopt
    .command('plan')
    .description(
      "print a cluster config (JSON) for adopting a live database, made from the source's own definitions",
    )
    .requiredOption('--from <url>', 'the live database (postgres://…)')
    .requiredOption('--root <table>', 'the root table: its rows own the others (e.g. users)')
    .requiredOption('--servers <list>', 'the cluster servers: NAME=URL[,NAME=URL…]')
    .option('--catalog <name>', 'the server that holds the catalog (default: the first)')
    .option('--shards <n>', 'logical shards (default 2048)', positiveInteger('--shards'))
    .option('--reference <tables>', 'tables copied to every server as reference tables: T[,T…]')
    .option('--schema <name>', "the source's schema (default public)")
    .action(
      async (flags: {
        from: string;
        root: string;
        servers: string;
        catalog?: string;
        shards?: number;
        reference?: string;
        schema?: string;
      }) => {
        if (!/^postgres(ql)?:\/\//.test(flags.from))
          throw new ShardflakeError('INVALID_ARGUMENT', '--from must be a postgres:// URL');
        const servers = parseServerList(flags.servers);
        const moved: string[] = [];
        const plan = await planAdoption({
          from: flags.from,
          root: flags.root,
          servers,
          catalog: flags.catalog,
          logicalShards: flags.shards,
          reference: flags.reference
            ?.split(',')
            .map((t) => t.trim())
            .filter(Boolean),
          schema: flags.schema,
          fromAsWritten: withoutLiteralPassword(flags.from, 'ADOPT_SOURCE_PASSWORD', moved),
          serversAsWritten: Object.fromEntries(
            Object.entries(servers).map(([name, url]) => [
              name,
              withoutLiteralPassword(url, `ADOPT_${name.toUpperCase().replace(/-/g, '_')}_PASSWORD`, moved),
            ]),
          ),
        });
        process.stdout.write(`${toJson(plan.config)}\n`);
        for (const note of plan.notes) process.stderr.write(`note: ${note}\n`);
        if (moved.length > 0)
          process.stderr.write(
            `note: the passwords given are not printed; the config reads them from ${moved.map((v) => `\${${v}}`).join(', ')}: set ${moved.join(', ')} before adopt run\n`,
          );
      },
    );

  adopt
    .command('run')
    .description(
      'create the cluster, copy the source at a snapshot, then apply its later commits until the cutover; rerun to resume',
    )
    .requiredOption('--config <file>', 'cluster config with an adopt section (from adopt plan)')
    .option('--cutover', 'cut over as soon as the stream has caught up')
    .option('--copy-workers <n>', 'tables copied at once (default 2)', positiveInteger('--copy-workers'))
    .option('--json', 'print the result as JSON')
    .action(async (flags: { config: string; cutover?: boolean; copyWorkers?: number; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      requireAdoptSection(config);
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      const bar = phasedProgress(9, !flags.json);
      try {
        const result = await runAdoption(config, {
          cutover: flags.cutover,
          copyWorkers: flags.copyWorkers,
          signal: stop.signal,
          afterStep: holdHook(),
          onProgress: (p) => {
            if (p.phase !== 'streaming') bar.update(p.phase, p.done, p.total);
          },
        }).finally(() => bar.stop());
        process.stdout.write(flags.json ? `${toJson(result)}\n` : formatRun(result));
      } finally {
        process.removeListener('SIGINT', onSignal);
        process.removeListener('SIGTERM', onSignal);
      }
    });

  adopt
    .command('cutover')
    .description('cut over: ask the running adopt run to, or resume the stream here and cut over')
    .requiredOption('--config <file>', 'cluster config with an adopt section')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { config: string; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      requireAdoptSection(config);
      const done = await cutoverRequest(config, { afterStep: holdHook() });
      if (flags.json) process.stdout.write(`${toJson(done)}\n`);
      else if (done.by === 'this process') process.stdout.write(formatRun(done.result));
      else
        process.stdout.write(
          `adopt cutover: switched by the running adopt run${done.pauseMs === null ? '' : `, writes paused ${done.pauseMs.toFixed(0)} ms`}\n`,
        );
    });

  adopt
    .command('status')
    .description('phase, rows copied per table, how far the stream is behind, WAL held on the source, ETA')
    .requiredOption('--config <file>', 'cluster config with an adopt section')
    .option('--json', 'print the status as JSON')
    .action(async (flags: { config: string; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      requireAdoptSection(config);
      const status = await adoptionStatus(config);
      process.stdout.write(flags.json ? `${toJson(status)}\n` : formatStatus(status));
    });

  adopt
    .command('abort')
    .description('before the cutover: remove everything the adoption made, on the source and on the servers')
    .requiredOption('--config <file>', 'cluster config with an adopt section')
    .option('--json', 'print the result as JSON')
    .action(async (flags: { config: string; json?: boolean }) => {
      const config = await loadConfig(flags.config);
      requireAdoptSection(config);
      const result = await abortAdoption(config);
      process.stdout.write(
        flags.json
          ? `${toJson(result)}\n`
          : `adopt abort: the source ${describeUrl(config.adopt?.from as string)} is as it was (slot and publication ${result.droppedSlot ? 'dropped' : 'already gone'})${result.removedCluster ? '; the cluster the adoption created is removed' : '; the adopted rows are removed from the shards'}\n`,
      );
    });
}
