/*
 * leases/: Worker-id leases from the catalog for app-side generators, with heartbeats and fencing tokens.
 *
 * May import: errors, ids, postgres, catalog.
 */
import { grantLease, installLeases, releaseLease, renewLease } from '../catalog/leases.js';
import { ShardflakeError } from '../errors/errors.js';
import { createGenerator } from '../ids/generator.js';
import { type Layout, resolveLayout } from '../ids/layout.js';
import { type Queryable, wrapPgError } from '../postgres/connect.js';

/**
 * Worker-id leases from the catalog, for app-side generators (Snowflake, Discord, Sonyflake, LSID): no two live
 * processes hold the same worker id, without ZooKeeper and without hashing a MAC address into a space where two
 * machines can collide.
 *
 * Semantics:
 * - `acquireLease` takes the lowest worker id of the namespace that is free or whose lease has expired, in one
 *   statement (two processes racing for the same id: one wins, the other takes the next). Expiry is judged by the
 *   catalog server's clock only, so the holders' clocks never have to agree with each other.
 * - Every grant gets a fencing token from one catalog sequence: a later holder of the same worker id always has
 *   a larger token, so storage that remembers the highest token it has seen can refuse a stale holder.
 * - The holder renews with `heartbeat()` (automatically every ttl/3 unless `autoHeartbeat: false`). A renewal
 *   succeeds only while the row still carries this holder's token and has not expired; otherwise the lease is lost.
 * - The holder judges validity by its own monotonic clock, conservatively: the lease is valid until
 *   (time the last successful renewal was *sent*) + ttl − `safetyMs`. The server-side expiry is at least that late,
 *   so when the holder stops trusting its lease no one else can have taken it yet.
 * - A generator made by `leasedGenerator` checks the lease before every id and throws LEASE_LOST once it is no
 *   longer valid: a process that lost its lease stops issuing ids.
 */

export interface LeaseOptions {
  /** Worker ids are unique within a namespace (default: the layout's name). */
  namespace?: string;
  /** Layout whose worker field bounds the ids (default snowflake). */
  layout?: string | Layout;
  /** Field to lease (default: the layout's first worker or machine field). */
  field?: string;
  /** Fewer ids than the field holds (e.g. for tests). */
  maxWorkers?: number;
  /** Lease length (default 30 000 ms). */
  ttlMs?: number;
  /** Margin below the ttl after which the holder stops trusting the lease (default ttl/5). */
  safetyMs?: number;
  /** Who holds it, for `cluster status` and debugging (default host:pid). */
  holder?: string;
  /** Renew every ttl/3 on a timer (default true). */
  autoHeartbeat?: boolean;
  /** Monotonic milliseconds, injectable for tests (default performance.now). */
  clock?: () => number;
}

/**
 * A worker id leased from the catalog for an app-side generator, with its fencing token; renewed in the background
 * until released or lost.
 */
export interface Lease {
  /** The namespace the worker id is unique in: the option's, or the layout's name. */
  readonly namespace: string;
  /** The layout whose field bounds the worker id (default snowflake); `leasedGenerator` makes its ids. */
  readonly layout: Layout;
  /** The name of the layout field the worker id fills (default: its first worker or machine field). */
  readonly field: string;
  /** The leased value: the lowest id of the field that was free or expired when acquired. */
  readonly workerId: number;
  /** The grant's fencing token: a later holder of the same worker id always has a larger one. */
  readonly token: bigint;
  /** True while the holder may issue ids. */
  isValid(): boolean;
  /** Throws LEASE_LOST unless valid. */
  assertValid(): void;
  /** Renews the lease; throws LEASE_LOST when it was taken over or had expired. */
  heartbeat(): Promise<void>;
  /** Gives the worker id back. */
  release(): Promise<void>;
}

function leaseField(layout: Layout, field?: string) {
  const f = field
    ? layout.field(field)
    : layout.fields.find((x) => x.kind === 'worker' || x.kind === 'machine');
  if (!f || f.kind === 'time' || f.kind === 'sequence') {
    throw new ShardflakeError(
      'INVALID_ARGUMENT',
      `layout ${layout.name} has no ${field ?? 'worker or machine'} field to lease`,
    );
  }
  return f;
}

/**
 * Leases the lowest free or expired worker id of a layout's worker field from the catalog, and renews it every
 * ttl/3; `NO_FREE_WORKER` when every id is leased.
 */
export async function acquireLease(catalog: Queryable, options: LeaseOptions = {}): Promise<Lease> {
  const layout = resolveLayout(options.layout ?? 'snowflake');
  const field = leaseField(layout, options.field);
  const namespace = options.namespace ?? layout.name;
  const ttlMs = options.ttlMs ?? 30_000;
  const safetyMs = options.safetyMs ?? Math.floor(ttlMs / 5);
  const clock = options.clock ?? (() => performance.now());
  const maxWorkers = Math.min(options.maxWorkers ?? Number(field.max) + 1, Number(field.max) + 1);
  const holder = options.holder ?? `${process.env.HOSTNAME ?? 'host'}:${process.pid}`;
  if (!(ttlMs > safetyMs && safetyMs >= 0))
    throw new ShardflakeError('INVALID_ARGUMENT', 'ttlMs must be larger than safetyMs');

  try {
    await installLeases(catalog);
  } catch (error) {
    // Two first-time acquirers may race to create the table; the loser's IF NOT EXISTS still fails. Once more.
    if (!['23505', '42P07'].includes((error as { code?: string }).code ?? '')) throw wrapPgError(error);
    await installLeases(catalog).catch((again) => {
      throw wrapPgError(again);
    });
  }
  const sentAt = clock();
  let granted: { worker: number; token: bigint } | undefined;
  // Racing acquirers may pick the same free id; the loser's upsert matches no row and it tries the next free one.
  for (let attempt = 0; attempt < 5 && !granted; attempt++) {
    granted =
      (await grantLease(catalog, { namespace, maxWorkers, holder, ttlMs }).catch((error) => {
        throw wrapPgError(error);
      })) ?? undefined;
  }
  if (!granted) {
    throw new ShardflakeError(
      'NO_FREE_WORKER',
      `all ${maxWorkers} ${field.name} ids of namespace ${namespace} are leased`,
    );
  }
  const { worker, token } = granted;
  let validUntil = sentAt + ttlMs - safetyMs;
  let lost = false;
  let timer: NodeJS.Timeout | undefined;

  const lease: Lease = {
    namespace,
    layout,
    field: field.name,
    workerId: worker,
    token: BigInt(token),
    isValid: () => !lost && clock() < validUntil,
    assertValid() {
      if (!lease.isValid()) {
        throw new ShardflakeError(
          'LEASE_LOST',
          `the lease on ${field.name} ${worker} of namespace ${namespace} ${lost ? 'was taken over or released' : 'expired without a heartbeat'}; this process must stop issuing ids`,
        );
      }
    },
    async heartbeat() {
      if (lost) lease.assertValid();
      const at = clock();
      const renewed = await renewLease(catalog, { namespace, worker, token, ttlMs }).catch((error) => {
        throw wrapPgError(error);
      });
      if (!renewed) {
        lost = true;
        if (timer) clearInterval(timer);
        lease.assertValid();
      }
      validUntil = at + ttlMs - safetyMs;
    },
    async release() {
      if (timer) clearInterval(timer);
      const wasLost = lost;
      lost = true;
      if (wasLost) return;
      await releaseLease(catalog, { namespace, worker, token }).catch((error) => {
        throw wrapPgError(error);
      });
    },
  };
  if (options.autoHeartbeat ?? true) {
    timer = setInterval(
      () => {
        lease.heartbeat().catch(() => {});
      },
      Math.max(10, Math.floor(ttlMs / 3)),
    );
    timer.unref();
  }
  return lease;
}

/**
 * An app-side generator for the leased worker id that refuses to issue ids once the lease is no longer valid.
 * Other generator options (clock, process, …) pass through to createGenerator.
 */
export function leasedGenerator(
  lease: Lease,
  options: Omit<Parameters<typeof createGenerator>[0], 'worker'> & { layout?: string | Layout } = {},
): {
  /** The next id, after checking that the lease is still valid (`LEASE_LOST` once it is not). */
  next(): bigint;
  /** The layout the ids are made in: the lease's, unless the options name another. */
  layout: Layout;
} {
  const generator = createGenerator({ layout: lease.layout, ...options, [lease.field]: lease.workerId });
  return {
    layout: generator.layout,
    next() {
      lease.assertValid();
      return generator.next();
    },
  };
}
