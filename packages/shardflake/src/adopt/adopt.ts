/*
 * adopt/: Taking one live PostgreSQL database to shards while it serves traffic (SPEC §I): the plan from the
 * source's own definitions, the copy at a replication slot's snapshot, the change stream applied exactly once, the
 * verification, the fenced cutover, status and abort. The shape of Vitess's vreplication: each step a module, the
 * adoption's record in the catalog between them (catalog/adopt.ts).
 *
 * May import: errors, ids, postgres, config, topology, catalog, fence, routing, lookups, reference, admin, move.
 */
export { type AbortResult, abortAdoption } from './abort.js';
export { type AdoptPlan, DEFAULT_ADOPT_SHARDS, type PlanOptions, planAdoption } from './plan.js';
/**
 * The modules, in the order an adoption runs them:
 * - source-schema.ts reads the source's pg_catalog; plan.ts turns it into a config (placement, templates, lookups,
 *   what cannot hold inside a shard).
 * - model.ts: the adoption as the engine uses it (each table's columns, key, placement, entries, lookups).
 * - run.ts: the phases, resumable; boundary.ts: where old ids end and the cluster's begin.
 * - copy.ts and copy-split.ts: every table at the slot's snapshot, routed to its shards with COPY.
 * - slot.ts, pgoutput.ts, stream.ts, apply.ts: the source's later commits read from the slot over SQL, decoded,
 *   and applied once on every server (two-phase per batch, each server's position in the batch's transaction).
 * - verify.ts and cutover.ts: the copies compared at a pinned moment, the fenced write pause, the switch.
 * - status.ts and abort.ts.
 */
export { cutoverRequest } from './request.js';
export {
  type AdoptProgress,
  type AdoptRunOptions,
  type AdoptRunResult,
  adoptionNames,
  runAdoption,
} from './run.js';
export { type AdoptStatus, adoptionStatus, requireAdoptSection } from './status.js';
