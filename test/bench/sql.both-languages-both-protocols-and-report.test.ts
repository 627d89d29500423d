import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { findPgbench, type Pgbench } from '../../packages/cli/src/bench/pgbench.js';
import type { SqlBenchRatio, SqlBenchResult } from '../../packages/cli/src/bench/sql.js';
import { startCli } from '../support/cli.js';

test('bench sql measures next_id() written both ways against bigserial with pgbench (simple, prepared) and node-postgres (unnamed, named), and --report charts every ratio', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'shardflake-report-'));
  try {
    const file = join(dir, 'sql.html');
    const args = [
      'bench',
      'sql',
      '--rows',
      '3000',
      '--rounds',
      '1',
      '--seconds',
      '1',
      '--json',
      '--report',
      file,
    ];
    const run = await startCli(args).done;
    assert.equal(run.code, 0, run.stderr);
    const result = JSON.parse(run.stdout) as SqlBenchResult;
    assert.deepEqual(
      result.variants.map((v) => v.language),
      ['plpgsql', 'sql'],
    );
    // /usr/bin/pgbench (PostgreSQL 15's client) drives the embedded PostgreSQL 18 server; without one the run says
    // why and leaves the pgbench figures out.
    const pgbench = await findPgbench();
    if (pgbench === null) {
      assert.deepEqual(result.pgbench, {
        skipped: 'no pgbench binary found on PATH or in /usr/lib/postgresql/*/bin',
      });
    } else {
      assert.equal((result.pgbench as Pgbench).binary, pgbench.binary);
      assert.match((result.pgbench as Pgbench).version, /^pgbench \(PostgreSQL\) \d+/);
    }
    const b = result.bigserial;
    for (const v of result.variants) {
      // Every ratio is the median of the rounds' own ratios to bigserial (or nextval), each round paired with the
      // baseline measured in it, and every side was measured.
      const pairs: [SqlBenchRatio | null, number[] | undefined][] = [
        [v.bulk, b.bulkMs.samples],
        // An embedded server runs on this machine: the CPU time of its backend is measured too.
        [v.bulkCpu, b.bulkCpuMs?.samples],
        [v.pgbenchSimple, b.pgbenchSimplePerSecond?.samples],
        [v.pgbenchPrepared, b.pgbenchPreparedPerSecond?.samples],
        [v.singlePrepared, b.singlePreparedPerSecond.samples],
        [v.singleUnprepared, b.singleUnpreparedPerSecond.samples],
        [v.calls, b.nextvalPerSecond.samples],
      ];
      for (const [figure, baseline] of pairs) {
        if (pgbench === null && figure === null && baseline === undefined) continue;
        assert.ok(figure !== null && baseline !== undefined, 'every side of every protocol was measured');
        assert.equal(figure.value.samples.length, 1);
        const expected = figure.value.samples.map(
          (x, i) => Math.round((x / (baseline[i] as number)) * 1000) / 1000,
        );
        assert.deepEqual(figure.ratios, expected);
        const sorted = [...expected].sort((p, q) => p - q);
        assert.equal(figure.ratio, sorted[Math.floor(sorted.length / 2)]);
      }
      for (const figure of [
        v.bulk,
        v.bulkCpu,
        v.pgbenchSimple,
        v.pgbenchPrepared,
        v.singlePrepared,
        v.singleUnprepared,
        v.calls,
      ]) {
        if (figure === null) continue;
        assert.ok(figure.value.median > 0 && figure.ratio > 0);
      }
      // 3,000 rows are far below 1,024 ids per ms for the time it takes: the time bits stay with the clock.
      assert.ok(
        v.bulk.aheadMs.every((ms) => ms < 1000),
        `ahead ${v.bulk.aheadMs}`,
      );
    }
    // The default install's table filled by a statement naming next_id_bulk(), against the same bigserial runs.
    for (const [figure, baseline] of [
      [result.nextIdBulk.bulk, b.bulkMs.samples],
      [result.nextIdBulk.bulkCpu, b.bulkCpuMs?.samples],
    ] as const) {
      assert.ok(figure && baseline);
      assert.deepEqual(
        figure.ratios,
        figure.value.samples.map((x, i) => Math.round((x / (baseline[i] as number)) * 1000) / 1000),
      );
    }
    assert.ok(result.nextIdBulk.bulk.aheadMs.every((ms) => ms < 1000));
    const html = await readFile(file, 'utf8');
    assert.doesNotMatch(html, /<script/i);
    for (const [label, value] of [
      ['bulk INSERT … SELECT time', result.nextIdBulk.bulk.ratio],
      ['bulk INSERT … SELECT server CPU', (result.nextIdBulk.bulkCpu as SqlBenchRatio).ratio],
    ] as const)
      assert.ok(html.includes(`label: naming next_id_bulk(): ${label}; value: ${value}"`), label);
    for (const v of result.variants) {
      const bars: [string, number][] = [
        ['bulk INSERT … SELECT time', v.bulk.ratio],
        ['bulk INSERT … SELECT server CPU', (v.bulkCpu as SqlBenchRatio).ratio],
        ['single-row node-postgres unnamed /s', v.singleUnprepared.ratio],
        ['single-row node-postgres named /s', v.singlePrepared.ratio],
        ['calls /s (vs nextval)', v.calls.ratio],
      ];
      if (v.pgbenchSimple && v.pgbenchPrepared) {
        bars.push(['single-row pgbench simple /s', v.pgbenchSimple.ratio]);
        bars.push(['single-row pgbench prepared /s', v.pgbenchPrepared.ratio]);
      }
      for (const [label, value] of bars) {
        assert.ok(
          html.includes(`label: ${v.language}: ${label}; value: ${value}"`),
          `${v.language}: ${label}`,
        );
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
