import type { ClusterConfig } from '../config/config.js';
import { ShardflakeError } from '../errors/errors.js';
import { wrapPgError } from '../postgres/connect.js';
import { connectServer } from '../topology/connections.js';

/**
 * Replication slots, WAL senders and logical replication workers are fixed at server start, and running out of
 * them half-way through a rebalance fails sets late and leaves work to undo. So the plan is checked first: a set is
 * one stream, which takes on its source one replication slot and one WAL sender, and on its target one logical
 * replication (apply) worker out of `max_logical_replication_workers` and `max_worker_processes`. With at most
 * `streamsPerServer` sets on a server at a time, a server needs room for min(streamsPerServer, its sets) of each.
 * The brief replication connection that creates the set's slot is closed before its subscription connects, so it
 * never needs a second WAL sender.
 */
export interface ServerReplicationRoom {
  server: string;
  freeSlots: number;
  freeWalSenders: number;
  freeApplyWorkers: number;
  freeWorkerProcesses: number;
  settings: Record<string, number>;
}

const ROOM_SQL = `
SELECT current_setting('max_replication_slots')::int AS max_replication_slots,
       (SELECT count(*)::int FROM pg_replication_slots) AS slots_used,
       current_setting('max_wal_senders')::int AS max_wal_senders,
       (SELECT count(*)::int FROM pg_stat_replication) AS senders_used,
       current_setting('max_logical_replication_workers')::int AS max_logical_replication_workers,
       (SELECT count(*)::int FROM pg_stat_subscription WHERE pid IS NOT NULL) AS apply_used,
       current_setting('max_worker_processes')::int AS max_worker_processes,
       (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type NOT IN
          ('client backend', 'checkpointer', 'background writer', 'walwriter', 'startup', 'archiver',
           'walsender', 'walreceiver', 'autovacuum worker', 'io worker', 'walsummarizer', 'slotsync worker')) AS workers_used`;

export async function replicationRoom(config: ClusterConfig, server: string): Promise<ServerReplicationRoom> {
  const client = await connectServer(config, server, { applicationName: 'shardflake move check' });
  try {
    const { rows } = await client.query(ROOM_SQL);
    const r = rows[0] as Record<string, number>;
    return {
      server,
      freeSlots: (r.max_replication_slots ?? 0) - (r.slots_used ?? 0),
      freeWalSenders: (r.max_wal_senders ?? 0) - (r.senders_used ?? 0),
      freeApplyWorkers: (r.max_logical_replication_workers ?? 0) - (r.apply_used ?? 0),
      freeWorkerProcesses: (r.max_worker_processes ?? 0) - (r.workers_used ?? 0),
      settings: r,
    };
  } catch (error) {
    throw wrapPgError(error);
  } finally {
    await client.end().catch(() => {});
  }
}

/** What the plan needs on each server, with at most `streamsPerServer` sets there at a time. */
export function replicationNeeds(
  sets: readonly { from: string; to: string }[],
  streamsPerServer: number,
): Map<string, { asSource: number; asTarget: number }> {
  const needs = new Map<string, { asSource: number; asTarget: number }>();
  for (const set of sets) {
    const from = needs.get(set.from) ?? { asSource: 0, asTarget: 0 };
    from.asSource++;
    needs.set(set.from, from);
    const to = needs.get(set.to) ?? { asSource: 0, asTarget: 0 };
    to.asTarget++;
    needs.set(set.to, to);
  }
  for (const need of needs.values()) {
    need.asSource = Math.min(need.asSource, streamsPerServer);
    need.asTarget = Math.min(need.asTarget, streamsPerServer);
  }
  return needs;
}

/** Throws NOT_SUPPORTED naming every shortfall when some server lacks room for the plan's streams. */
export async function checkReplicationLimits(
  config: ClusterConfig,
  sets: readonly { from: string; to: string }[],
  streamsPerServer: number,
): Promise<void> {
  const needs = replicationNeeds(sets, streamsPerServer);
  const short: string[] = [];
  for (const [server, need] of needs) {
    const room = await replicationRoom(config, server);
    const s = room.settings;
    const lack = (what: string, needed: number, free: number, setting: string, used: string) => {
      if (needed > free) {
        short.push(
          `server ${server} needs ${needed} ${what} but has ${Math.max(0, free)} free (${setting}=${s[setting]}, ${s[used]} in use)`,
        );
      }
    };
    lack('replication slot(s)', need.asSource, room.freeSlots, 'max_replication_slots', 'slots_used');
    lack('WAL sender(s)', need.asSource, room.freeWalSenders, 'max_wal_senders', 'senders_used');
    lack(
      'logical replication worker(s)',
      need.asTarget,
      room.freeApplyWorkers,
      'max_logical_replication_workers',
      'apply_used',
    );
    lack(
      'worker process(es)',
      need.asTarget,
      room.freeWorkerProcesses,
      'max_worker_processes',
      'workers_used',
    );
  }
  if (short.length > 0) {
    throw new ShardflakeError(
      'NOT_SUPPORTED',
      `the move plan needs more replication resources than the servers allow: ${short.join('; ')}; raise the settings (a restart), lower --streams-per-server, or run shardflake cluster cleanup to free leftovers`,
    );
  }
}
