/**
 * The router's public face. Its parts live in ./router/ (one module each: map, retry, session, rows, bulk,
 * scatter, statements, positions, server-nodes, events); this file keeps `../cluster/router.js` importable.
 */

export type { InsertManyOptions } from './router/bulk.js';
export type { RouterEvent, RouterEventHook } from './router/events.js';
export type { WriteRetry } from './router/retry.js';
export type { Router, RouterOptions } from './router/router.js';
export { createRouter, FENCED_SQLSTATE } from './router/router.js';
export type { InsertOptions, Row } from './router/rows.js';
export type {
  FeedCommon,
  FeedKeys,
  FeedOptions,
  FeedPage,
  MergedQuery,
  ShardQuery,
} from './router/scatter.js';
export type { Lsn, NodeLease, NodeRole } from './router/server-nodes.js';
export type { SessionOptions, ShardSession, ShardTarget } from './router/session.js';
export type { SessionPool, SessionPoolClient } from './router/session-pool.js';
export { sessionPool } from './router/session-pool.js';
