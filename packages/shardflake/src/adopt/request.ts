import {
  adoptPhaseReached,
  readAdoption,
  requestAdoptCutover,
  tryLockAdoption,
  unlockAdoption,
} from '../catalog/adopt.js';
import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { connectServer } from '../topology/connections.js';
import { type AdoptRunOptions, type AdoptRunResult, runAdoption } from './run.js';

/**
 * `cluster adopt cutover`: when an `adopt run` streams (it holds the adoption's lock), it is asked through the
 * catalog to cut over once caught up, and this waits (at most `timeoutMs`) for the switch; when none runs, this
 * process resumes the stream itself and cuts over (`runAdoption` with `cutover`). A copy that has not finished is
 * refused: there is nothing to cut over to yet.
 */
export async function cutoverRequest(
  config: ClusterConfig,
  options: AdoptRunOptions & { timeoutMs?: number } = {},
): Promise<
  { by: 'this process'; result: AdoptRunResult } | { by: 'the running adopt run'; pauseMs: number | null }
> {
  const catalog = await connectServer(config, config.catalog, {
    applicationName: 'shardflake adopt cutover',
  });
  try {
    const record = await readAdoption(catalog);
    if (!record || record.phase === 'aborted')
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        `${config.source}: no adoption to cut over; start one with adopt run`,
      );
    if (adoptPhaseReached(record.phase, 'switched'))
      return { by: 'the running adopt run', pauseMs: record.pauseMs };
    if (record.phase === 'copying')
      throw new ShardflakeError(
        'INVALID_ARGUMENT',
        'the adoption is still copying (or its copy was interrupted): let adopt run finish the copy first',
      );
    if (await tryLockAdoption(catalog)) {
      await unlockAdoption(catalog);
      return { by: 'this process', result: await runAdoption(config, { ...options, cutover: true }) };
    }
    await requestAdoptCutover(catalog);
    const deadline = performance.now() + (options.timeoutMs ?? 600_000);
    for (;;) {
      const now = await readAdoption(catalog);
      if (now && adoptPhaseReached(now.phase, 'switched'))
        return { by: 'the running adopt run', pauseMs: now.pauseMs };
      if (await tryLockAdoption(catalog)) {
        // The run that held the adoption has stopped without switching.
        await unlockAdoption(catalog);
        const after = await readAdoption(catalog);
        if (after && adoptPhaseReached(after.phase, 'switched'))
          return { by: 'the running adopt run', pauseMs: after.pauseMs };
        throw new ShardflakeError(
          'ADOPT_FAILED',
          `the adopt run stopped before its cutover${after?.lastError ? `: ${after.lastError}` : ''}; run adopt cutover again`,
        );
      }
      if (performance.now() > deadline)
        throw new ShardflakeError(
          'ADOPT_FAILED',
          `the running adopt run did not cut over within ${options.timeoutMs ?? 600_000} ms; see adopt status`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (error) {
    throw error instanceof ShardflakeError ? error : wrapPgError(error);
  } finally {
    await catalog.end().catch(() => {});
  }
}
