import type pg from 'pg';
import { ADOPT_LOCK_KEY, readAdoption } from '../catalog/adopt.js';
import type { Problem, VerifyCheck } from '../config/verify-check.js';
import { connect } from '../postgres/connect.js';
import { buildModel } from './model.js';
import { adoptionNames } from './run.js';
import { peekTransactions } from './slot.js';
import { readSourceSchema } from './source-schema.js';
import { Targets } from './targets.js';
import { compareCopies } from './verify.js';

/**
 * The `cluster verify` check of an adoption (docs/adopt.md): the source and the shards compared table by table and
 * shard by shard (verify.ts) while both hold the same moment — fenced and not switched yet, or streaming with no
 * run applying and nothing left in the slot. While a run streams, the comparison is the cutover's own (it pins a
 * moment); after the switch the shards take writes the source never sees, so there is nothing to compare. The CLI
 * adds it to the checks, as it adds the moves' (`verifyCluster(config, { checks: [...VERIFY_CHECKS, …] })`).
 */
const NAME = 'adoption: the source against the shards';

export const adoptionCheck: VerifyCheck = {
  name: NAME,
  async run(config, pools) {
    if (!config.adopt) return [];
    const state = await pools.use(config.catalog, async (catalog) => {
      const record = await readAdoption(catalog);
      const { rows } = await catalog.query(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted) AS running",
        [ADOPT_LOCK_KEY],
      );
      return { record, running: (rows[0] as { running: boolean }).running };
    });
    const phase = state.record?.phase;
    if (phase !== 'fenced' && !(phase === 'streaming' && !state.running)) return [];
    const source = await connect(config.adopt.from, { applicationName: 'shardflake verify' });
    const open: pg.Client[] = [source];
    try {
      if (phase === 'streaming') {
        // Only when the slot holds no change of the adopted tables: the shards then hold what the source holds.
        const names = adoptionNames(config);
        if ((await peekTransactions(source, names.slot, names.publication, 1)).length > 0) return [];
      }
      const model = buildModel(config, await readSourceSchema(source, config.adopt.schema));
      const targets = await pools.use(config.catalog, (catalog) =>
        Targets.open(config, catalog as pg.ClientBase),
      );
      try {
        await source.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        const pinned = new Map<string, pg.Client>();
        for (const server of targets.servers) {
          const client = await targets.connect(server, 'shardflake verify');
          await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
          pinned.set(server, client);
        }
        const differences = await compareCopies(model, targets, source, pinned);
        return differences.map(
          (what): Problem => ({ check: NAME, where: `source ${config.adopt?.schema}`, what }),
        );
      } finally {
        await targets.close();
      }
    } finally {
      await Promise.all(open.map((c) => c.end().catch(() => {})));
    }
  },
};
