import { after } from 'node:test';
import type { EmbeddedServer } from '../../packages/embedded/src/embedded.js';
import {
  type EmbeddedReplica,
  replicaCaughtUp,
  startEmbeddedReplica,
} from '../../packages/embedded/src/embedded-replica.js';

/**
 * Real streaming replicas of embedded servers for tests (how they are made: src/postgres/embedded-replica.ts).
 */
export type Replica = EmbeddedReplica;

/**
 * Makes and starts a streaming replica of `primary`; stopped (and its folder removed) after the test file. Call it
 * at the top level of the file, as useServers: an after() hook registered inside a running test may run as soon
 * as that test's siblings are done, stopping the replica in the middle of it.
 */
export async function startReplica(primary: EmbeddedServer): Promise<Replica> {
  const replica = await startEmbeddedReplica(primary);
  after(() => replica.stop());
  return replica;
}

/** Waits until the replica has replayed everything the primary has written so far. */
export const caughtUp = replicaCaughtUp;
