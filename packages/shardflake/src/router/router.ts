/*
 * router/: `createRouter`: builds a router from a config and hands each method to the folder that does the work
 * (routing, transactions, lookups, reference, sql); its own files are the options, the nodes of servers learned
 * from the catalog, and the guard against stray writes.
 *
 * May import: errors, ids, postgres, config, topology, catalog, telemetry, deadlocks, fence, recovery, routing,
 * transactions, lookups, reference, sql.
 */
import type { ShardPlacement } from '../catalog/shards.js';
import { type ClusterConfig, DEFAULT_SCHEMA_PREFIX } from '../config/config.js';
import { configDrift } from '../config/drift.js';
import type { LookupDefinition } from '../config/lookups.js';
import { referenceTableNames } from '../config/reference.js';
import { DeadlockDetector, type DeadlockOptions } from '../deadlocks/detector.js';
import { ShardflakeError } from '../errors/errors.js';
import { checkPrivileges } from '../fence/privileges.js';
import type { ShardflakeId } from '../ids/id.js';
import type { Layout } from '../ids/layout.js';
import { sessionLookups } from '../lookups/commit.js';
import {
  createLookupReader,
  type LookupHit,
  type LookupHitWithRow,
  type LookupOptions,
  type LookupValue,
} from '../lookups/read.js';
import { lookupDirectInsert, lookupReadiness } from '../lookups/readiness.js';
import { insertManyKept, insertPlaced, withShardKept, withShardsKept, writeKept } from '../lookups/rows.js';
import { connect } from '../postgres/connect.js';
import type { RecoveryReport } from '../recovery/recovery.js';
import { type TransactionOptions, TransactionState } from '../recovery/state.js';
import { referenceServersOf } from '../reference/servers.js';
import { type ReferenceSession, type ReferenceTargets, withReference } from '../reference/write.js';
import { type InsertManyOptions, insertMany } from '../routing/bulk.js';
import type { RetryPolicy, RouterContext, SqlPrepare, WriteRetry } from '../routing/context.js';
import { createShardMap, type MapState, placementIn, shardOfIdIn } from '../routing/map.js';
import { ReadPositions } from '../routing/positions.js';
import { deleteRow, getRow, type InsertOptions, insertRow, type Row, updateRow } from '../routing/rows.js';
import {
  type FeedOptions,
  type FeedPage,
  feed,
  type MergedQuery,
  queryByShard,
  queryMerged,
  type ShardQuery,
} from '../routing/scatter.js';
import { type SessionOptions, type ShardSession, type ShardTarget, withShard } from '../routing/session.js';
import { type ShardKey, shardForKey } from '../routing/shard-key.js';
import { Statements } from '../routing/statements.js';
import type { SqlOptions, SqlResult, SqlStreamOptions } from '../sql/index.js';
import type { RouterEventHook } from '../telemetry/events.js';
import { telemetryHook, telemetryInstalled } from '../telemetry/telemetry.js';
import { emitSafely } from '../telemetry/trace.js';
import { primaryUrl, serverNodeUrls } from '../topology/connections.js';
import { type LoginMemory, withLoginMemory } from '../topology/login-backoff.js';
import type { ServerNodes, ServerNodesOptions } from '../topology/nodes.js';
import { createServerNodes } from '../topology/server-nodes.js';
import { DEFAULT_SHARDS_PER_CONNECTION } from '../topology/warm-shards.js';
import type { WithShardsOptions } from '../transactions/with-shards.js';
import { serverLoginMemory, serverUrls } from './learned-server.js';
import { checkRouterOptions } from './options.js';
import { guardStrays } from './strays.js';

/**
 * The router: shard key → logical shard → physical server, over one ServerNodes (node pools) per server.
 *
 * Its parts, one module each: map.ts (the shard map, LISTEN/NOTIFY, the catalog outage), retry.ts (when an
 * operation runs again: fenced, moving, moved, failed over), session.ts (withShard), rows.ts (insert, get,
 * update, delete), bulk.ts (insertMany), scatter.ts (feed and cross-shard queries), statements.ts (SQL text
 * cache), positions.ts (read-your-writes positions and tokens). No operation makes a catalog round trip of its
 * own, and statement text is built once and cached, which keeps routing within a few percent of plain `pg`.
 *
 * Writes during a shard move: a write that reaches a fenced copy (SQLSTATE SF001, raised by the move's fence) or
 * fails on a shard in state `moving` retries for up to `writeRetryMs` (10 s), so a cutover pauses writes instead
 * of failing them. Between attempts it waits for whichever comes first: the NOTIFY of a newer map (the cutover's
 * catalog switch, usually a few ms after the fence commits) or a backoff timeout (10, 20, 40 … 200 ms, after which
 * the map is re-read anyway, in case a notification was lost).
 */
export interface RouterOptions {
  /** Connections per server (per node) pool (default 10). */
  poolSize?: number;
  /**
   * How long an operation waits for a connection, a free one from a full pool or a new one from the server
   * (default 5000 ms); past it, POOL_TIMEOUT when the pool's connections all stayed busy, otherwise the server's
   * error (SERVER_UNREACHABLE when nothing answers).
   */
  connectTimeoutMs?: number;
  /** Close a pooled connection after this many checkouts (default 0: never). See "Connection recycling". */
  maxUses?: number;
  /** Close a pooled connection this many seconds after it opened (default 0: never). */
  maxLifetimeSeconds?: number;
  /**
   * Close a pooled connection when it is released once it has served more than this many distinct shards
   * (default 200; 0: never). A PostgreSQL backend keeps what it loaded for every shard it served (≈ 155 kB per
   * shard written with generator version 5, ≈ 70–84 kB with version 6: the shard's next_id() and its cached plans), so without a bound every pooled connection ends
   * up holding its whole server's worth. Connections also prefer the shards they served before, so with a pool
   * of P and n shards on a server each settles on about n / P of them and, below the bound, none is closed. See
   * "Connections and shards" in docs/applications.md.
   */
  shardsPerConnection?: number;
  /** How long a write keeps retrying on a fenced or moving shard (default 10 000 ms). */
  writeRetryMs?: number;
  /** Listen for map changes (default true). */
  listen?: boolean;
  /**
   * Most shards one statement of `router.sql` reads (default 64). A server's shards are cut into statements of at
   * most this many: PostgreSQL plans a UNION ALL in time that grows with the square of its branches and holds
   * every branch's plan and locks until the statement ends, so one statement over thousands of shards takes
   * seconds to plan and a gigabyte of the backend's memory; pieces of 64 keep both small and linear in shards.
   */
  sqlShardsPerStatement?: number;
  /**
   * Most pooled connections of one server that one `router.sql` call uses at once to run its pieces (default 4,
   * never more than `poolSize`); a stream (`router.sqlStream`) holds at most this many per server while it reads,
   * each piece then covering a share of the server's shards.
   */
  sqlConnectionsPerServer?: number;
  /**
   * When `router.sql` sends its pieces as named prepared statements, planned once per pooled connection (a call's
   * own `prepare` wins). 'auto' (the default): from a query text's second call on; a server whose pooler answers
   * that a named statement is missing or already there (PgBouncer in transaction mode before 1.21, or with
   * `max_prepared_statements = 0`) gets unnamed ones from then on. 'always': every call, and such an answer is
   * an error. 'never': unnamed, each piece parsed and planned on every call. A connection keeps at most 128 of
   * them, least recently used out first. See "Prepared pieces" in docs/sql.md.
   */
  sqlPrepare?: SqlPrepare;
  /**
   * Values whose owner's shard the router remembers, for unique lookups (default 10,000; 0: none). A remembered
   * value is looked up with one read of its owner instead of two (docs/lookups.md, "The owner cache"). Memory: at
   * most this many values of up to 256 characters each (longer ones are not remembered), least recently used out
   * first.
   */
  lookupCacheSize?: number;
  /**
   * Check at start that the config's roles may do what a router does on every server that answers (read the
   * catalog; use every shard schema; read and write its tables) and refuse in one line, INSUFFICIENT_PRIVILEGE,
   * naming the server, the role and what it lacks — rather than failing at the first query that needs it
   * (default true; one extra connection per server at start). docs/security.md lists what each command needs.
   */
  checkPrivileges?: boolean;
  /** How often to try the catalog again while it does not answer (default 1000 ms). */
  catalogRetryMs?: number;
  /** Called after each map refresh. */
  onMapChange?: (version: bigint) => void;
  /** First wait between write retries when no newer map arrives (default 10 ms); it doubles up to the maximum. */
  retryBackoffMs?: number;
  /** Longest wait between write retries (default 200 ms). */
  maxRetryBackoffMs?: number;
  /** Called before each write retry on a fenced or moving shard, once the wait is over. */
  onRetry?: (retry: WriteRetry) => void;
  /** Every operation's end, retries, map changes, catalog outages (see events.ts). A throwing hook is ignored. */
  onEvent?: RouterEventHook;
  /**
   * Report operations to OpenTelemetry through `@opentelemetry/api` (default true; a no-op unless the application
   * installs an SDK). See telemetry.ts for the spans and metrics.
   */
  telemetry?: boolean;
  /**
   * Transactions across shards: background recovery and its timing (see recovery/state.ts); the deadlock
   * detector and the bounds on their waits — `deadlockCheckMs` (1000), `lockTimeoutMs` (10 000), `idleTimeoutMs`
   * (60 000) — see deadlocks/detector.ts and docs/transactions.md.
   */
  transactions?: TransactionOptions & DeadlockOptions;
  /** Servers with replicas: lag bound, failover wait, … (see ServerNodesOptions in server-nodes.ts). */
  replicas?: Pick<
    ServerNodesOptions,
    'maxReplicaLagMs' | 'replicaCheckMs' | 'failoverWaitMs' | 'rediscoverMs' | 'suspectMs'
  >;
}

/**
 * Routes an application's reads and writes to the logical shard and server they belong to, following the catalog's
 * shard map as it changes (`createRouter` makes one). docs/cluster.md and docs/applications.md are the guides.
 */
export interface Router {
  /** The version of the shard map the router routes by now (0n until the first map is loaded). */
  readonly mapVersion: bigint;
  /** How many logical shards the cluster has, as read from the catalog. */
  readonly logicalShards: number;
  /** The cluster's id layout as the catalog records it, with its epoch applied: the one `shardOfId` reads. */
  readonly layout: Layout;
  /** True while the catalog does not answer and the router serves from its last map. */
  readonly catalogDown: boolean;
  /** The logical shard of a shard key (see `ShardKey` for the rule). */
  shardFor(key: ShardKey): number;
  /** The shard named in an id's shard bits; INVALID_ID when they name a shard outside the cluster. */
  shardOfId(id: ShardflakeId): number;
  /** Where a logical shard lives now, by the router's map: its server, schema and state. */
  placement(shard: number): ShardPlacement;
  /**
   * Inserts one row into the shard of `options.key` (or `options.shard`, or beside its entry of the unique lookup
   * `options.lookup`) and returns its id, made by that shard's `next_id()`.
   */
  insert(table: string, row: Row, options: InsertOptions): Promise<ShardflakeId>;
  /** The row of this id, typed as `R` (like pg's `query<R>`: the type is the caller's word, not checked). */
  get<R extends object = Row>(table: string, id: ShardflakeId): Promise<R | null>;
  /** Updates the columns of `changes` in the row of this id; true when the row was there. */
  update(table: string, id: ShardflakeId, changes: Row): Promise<boolean>;
  /** Deletes the row of this id; true when the row was there. */
  delete(table: string, id: ShardflakeId): Promise<boolean>;
  /**
   * Inserts many rows, split by shard (`key(row)`, the shard of an owner's id `id(row)`, or one `shard`): one
   * multi-row INSERT per shard, one transaction per server, servers in parallel. Returns the ids in input order;
   * `[]` for a table without an `id` column. See bulk.ts for what is atomic.
   */
  insertMany<R extends Row>(
    table: string,
    rows: readonly R[],
    options: InsertManyOptions<R>,
  ): Promise<ShardflakeId[]>;
  /**
   * The newest rows of many keys across their shards, by a column (`user_id = ANY(keys)`), merged in id order; pass
   * the page's `next` as `before` for the next page.
   */
  feed<R extends object = Row>(table: string, options: FeedOptions): Promise<FeedPage<R>>;
  /** Runs fn in one transaction in the target's shard (see session.ts and docs/applications.md, "Shard sessions"). */
  withShard<T>(
    target: ShardTarget,
    fn: (session: ShardSession) => Promise<T> | T,
    options?: SessionOptions,
  ): Promise<T>;
  /** Writes the reference tables on every server's copy, committed on every server or none (see reference/write.ts). */
  withReference<T>(fn: (session: ReferenceSession) => Promise<T> | T): Promise<T>;
  /**
   * Runs fn with one session per target (in order) and commits all of them or none: one local transaction per
   * server, two-phase commit across servers (see transactions/cross.ts and docs/transactions.md). With
   * `options.retry`, fn runs again after a deadlock or a serialization failure.
   */
  withShards<T>(
    targets: readonly ShardTarget[],
    fn: (sessions: ShardSession[]) => Promise<T> | T,
    options?: WithShardsOptions,
  ): Promise<T>;
  /** Settles this cluster's in-doubt transactions now (the router also does it by itself in the background). */
  recoverTransactions(): Promise<RecoveryReport>;
  /** A read run in many shards, merged newest first by id, with keyset pagination. */
  query<R extends object = Row>(query: MergedQuery): Promise<FeedPage<R>>;
  /** A read run in many shards, its rows per shard. */
  queryByShard<R extends object = Row>(query: ShardQuery): Promise<Map<number, R[]>>;
  /**
   * One SELECT across every shard (sharded tables by their unqualified names), answered as one database holding
   * every shard's rows would answer it, or refused with UNSUPPORTED_QUERY. See docs/sql.md.
   */
  sql(text: string, values?: readonly unknown[], options?: SqlOptions): Promise<SqlResult>;
  /** router.sql as an async iterator of rows: an answer without aggregates streams a batch per server at a time. */
  sqlStream(text: string, values?: readonly unknown[], options?: SqlStreamOptions): AsyncIterable<Row>;
  /**
   * The row of a lookup's table that holds `value` (config `lookups`, docs/lookups.md): `{ id, shard }`, or null.
   * One read of the entry's shard and one of the owner's, which is checked; `{ fetch: true }` also returns the
   * owner row (`row`), read by that check.
   */
  lookup(name: string, value: LookupValue): Promise<LookupHit | null>;
  /** The owner of a value, with its row read by the same check. */
  lookup(name: string, value: LookupValue, options: { fetch: true }): Promise<LookupHitWithRow | null>;
  /** The owner of a value, with its row when `options.fetch` is true. */
  lookup(
    name: string,
    value: LookupValue,
    options?: LookupOptions,
  ): Promise<LookupHit | LookupHitWithRow | null>;
  /** `lookup` for many values (one statement per server for the entries, one per server for the owners). */
  lookupMany(name: string, values: readonly LookupValue[]): Promise<(LookupHit | null)[]>;
  /** The router's write positions as an opaque token, for reads elsewhere that must see these writes. */
  readToken(): string;
  /** Makes this router's later reads see the writes of a token (from `readToken()` of any router). */
  observe(token: string): void;
  /** Re-reads the map from the catalog (throws when the catalog does not answer). */
  refresh(): Promise<void>;
  /** Stops listening for map changes and closes the router's connections. */
  close(): Promise<void>;
}

export { FENCED_SQLSTATE } from '../fence/fence.js';

const DEFAULTS = {
  poolSize: 10,
  sqlShardsPerStatement: 64,
  sqlConnectionsPerServer: 4,
  sqlPrepare: 'auto' as SqlPrepare,
  lookupCacheSize: 10_000,
  maxUses: 0,
  maxLifetimeSeconds: 0,
  shardsPerConnection: DEFAULT_SHARDS_PER_CONNECTION,
  writeRetryMs: 10_000,
  listen: true,
  checkPrivileges: true,
  catalogRetryMs: 1000,
  retryBackoffMs: 10,
  maxRetryBackoffMs: 200,
};

/** The config's file, when it has one, to start a message with. */
const sourceOf = (config: Partial<Pick<ClusterConfig, 'source'>>) =>
  config.source ? `${config.source}: ` : '';

/**
 * Starts a router. A full config (from loadConfig/validateConfig) is checked against the catalog: a config whose
 * logicalShards, layout or epoch differ from the cluster's is INVALID_CONFIG (see config-drift.ts).
 */
export async function createRouter(
  config: Pick<ClusterConfig, 'servers' | 'catalog'> & Partial<ClusterConfig>,
  options: RouterOptions = {},
): Promise<Router> {
  const opts = { ...DEFAULTS, ...checkRouterOptions(options) };
  if (config.servers[config.catalog] === undefined)
    throw new ShardflakeError('UNKNOWN_SERVER', `catalog server ${config.catalog} is not in the config`);
  const telemetry = opts.telemetry === false ? undefined : telemetryHook();
  const appHook = opts.onEvent;
  const hook =
    telemetry || appHook
      ? (event: Parameters<RouterEventHook>[0]) => {
          if (telemetry) emitSafely(telemetry, event);
          if (appHook) emitSafely(appHook, event);
        }
      : undefined;
  const map = createShardMap(await primaryUrl(config, config.catalog, { requireAll: false }), {
    listen: opts.listen,
    reconnectMs: opts.catalogRetryMs,
    catalogServer: config.catalog,
    emit: hook,
    onMapChange: opts.onMapChange,
    locateCatalog:
      serverNodeUrls(config, config.catalog).length > 1
        ? () => primaryUrl(config, config.catalog, { requireAll: false })
        : undefined,
  });
  const servers = new Map<string, ServerNodes>();
  // While an adoption runs, the shards are served from the source (routing/old-ids.ts): the config's `adopt.from`
  // is how this router reaches it (a router without it learns the address from the catalog, as for new servers).
  const withSource = config.adopt
    ? {
        ...config,
        servers: { ...config.servers, [config.adopt.server]: config.adopt.from },
        nodes: { ...(config.nodes ?? {}), [config.adopt.server]: [config.adopt.from] },
      }
    : config;
  // Fence on discovery (strays.ts): the catalog read now, and a connection of its own for a shard's lock.
  const strayCatalog = {
    get reader() {
      return map.catalog;
    },
    get logicalShards() {
      return loaded().logicalShards;
    },
    connect: async () =>
      connect(await primaryUrl(config, config.catalog, { requireAll: false }), {
        applicationName: 'shardflake router',
      }),
  };
  const commitServers = new Map<string, ServerNodes>();
  // Each server's node URLs (configured, or learned from the catalog) and its memory of refused logins, shared by
  // its data and commit pools (topology/login-backoff.ts).
  const logins = new Map<string, { urls: string[]; memory: LoginMemory }>();
  const pools = (server: string, applicationName: string): ServerNodes => {
    let login = logins.get(server);
    if (!login) {
      const urls = serverUrls(withSource, map.state, server);
      login = { urls, memory: serverLoginMemory(withSource, urls, server) };
      logins.set(server, login);
    }
    return withLoginMemory(
      createServerNodes(server, login.urls, {
        poolSize: opts.poolSize,
        connectTimeoutMs: opts.connectTimeoutMs,
        maxUses: opts.maxUses,
        maxLifetimeSeconds: opts.maxLifetimeSeconds,
        shardsPerConnection: opts.shardsPerConnection,
        applicationName,
        ...opts.replicas,
        onEvent: hook,
      }),
      login.memory,
    );
  };
  const policy: RetryPolicy = {
    writeRetryMs: opts.writeRetryMs,
    retryBackoffMs: opts.retryBackoffMs,
    maxRetryBackoffMs: opts.maxRetryBackoffMs,
    onRetry: opts.onRetry,
  };
  // The node addresses of a server: the config's, or the catalog's for one the router learned (learned-server.ts).
  const nodeList = (server: string) => {
    const known = map.state?.servers.get(server);
    return server in config.servers || !known
      ? config
      : { servers: { [server]: known[0] as string }, nodes: { [server]: known } };
  };
  const transactions = new TransactionState(
    {
      // The config's servers, and those this router learned and used since (a server added for a move, where one
      // of its transactions may have prepared): a server it never reached holds nothing of it.
      servers: () => [
        ...new Set([...Object.keys(config.servers), ...servers.keys(), ...commitServers.keys()]),
      ],
      catalog: config.catalog,
      nodes: (server) => ctx.nodes(server),
      connect: async (server) =>
        connect(await primaryUrl(nodeList(server), server, { requireAll: false }), {
          applicationName: 'shardflake router',
        }),
      hook: () => ctx.onEvent,
    },
    opts.transactions,
  );
  // Deadlocks across servers and the bounds on waits (deadlocks/detector.ts): the servers of the config and of
  // the map, each read on a connection of the detector's own.
  const deadlocks = new DeadlockDetector(
    {
      servers: () => [
        ...new Set([...Object.keys(config.servers), ...(map.state?.shards.map((s) => s.server) ?? [])]),
      ],
      catalog: config.catalog,
      connect: async (server) => {
        const learned = map.state?.servers.get(server) ?? [];
        return connect(
          await primaryUrl(
            server in config.servers
              ? config
              : { servers: { [server]: learned[0] ?? '' }, nodes: { [server]: learned } },
            server,
            { requireAll: false },
          ),
          { applicationName: 'shardflake deadlock detector', connectTimeoutMs: opts.connectTimeoutMs },
        );
      },
      emit: (event) => {
        if (hook) emitSafely(hook, event);
      },
    },
    opts.transactions,
  );
  // Tables with a lookup: their single-row writes keep the lookup in a transaction (lookups/rows.ts).
  const lookupDefinitions = config.lookups ?? [];
  const lookupTables = new Set(lookupDefinitions.map((l) => l.table));
  // Set once ctx exists (it asks the catalog through ctx's pools).
  let directInsert: ((lookups: readonly LookupDefinition[]) => Promise<boolean>) | undefined;
  const ctx: RouterContext = {
    referenceTables: referenceTableNames(config),
    sqlPieces: {
      shardsPerStatement: opts.sqlShardsPerStatement,
      connectionsPerServer: Math.min(opts.sqlConnectionsPerServer, opts.poolSize),
      prepare: opts.sqlPrepare,
    },
    sessionLookups,
    keptWrite: (table) =>
      lookupTables.has(table)
        ? (operation, shardOf, text, values, row) =>
            writeKept(
              ctx,
              lookupDefinitions.filter((l) => l.table === table),
              operation,
              shardOf,
              text,
              values,
              row,
              directInsert,
            )
        : undefined,
    map,
    transactions,
    deadlocks,
    statements: new Statements(),
    positions: new ReadPositions(),
    policy,
    // Operations trace themselves only for a reader: the application's hook, or an installed OpenTelemetry SDK
    // (without one the API records nothing, and building each operation's event would be the whole cost).
    get onEvent() {
      return appHook || (telemetry && telemetryInstalled()) ? hook : undefined;
    },
    nodes(server) {
      let nodes = servers.get(server);
      if (!nodes) {
        nodes = guardStrays(
          pools(server, 'shardflake router'),
          () => loaded().schemaPrefix,
          strayCatalog,
          hook,
        );
        servers.set(server, nodes);
      }
      return nodes;
    },
    commitNodes(server) {
      let nodes = commitServers.get(server);
      if (!nodes) {
        nodes = pools(server, 'shardflake router commit');
        commitServers.set(server, nodes);
      }
      return nodes;
    },
  };
  const loaded = () => map.state as MapState;
  // The servers withReference writes: the catalog's copies and shard servers, and copies learned since (servers.ts).
  const learnedCopies = new Set<string>();
  const referenceTargets: ReferenceTargets = {
    current: async () => referenceServersOf(await map.fresh(), Object.keys(config.servers), learnedCopies),
    learn(servers) {
      for (const server of servers) learnedCopies.add(server);
      map.markStale();
    },
  };
  directInsert = lookupDirectInsert(ctx, config.catalog);
  const lookups = createLookupReader(
    ctx,
    lookupDefinitions,
    lookupReadiness(ctx, config.catalog),
    opts.lookupCacheSize,
  );

  const router: Router = {
    get mapVersion() {
      return map.state?.version ?? 0n;
    },
    get logicalShards() {
      return loaded().logicalShards;
    },
    get layout() {
      return loaded().layout;
    },
    get catalogDown() {
      return map.catalogDown;
    },
    shardFor: (key) => shardForKey(key, loaded().logicalShards),
    shardOfId: (id) => shardOfIdIn(loaded(), id),
    placement: (shard) => placementIn(loaded(), shard),
    insert: (table, row, insertOptions) =>
      insertOptions?.lookup === undefined
        ? insertRow(ctx, table, row, insertOptions)
        : insertPlaced(ctx, lookupDefinitions, table, row, insertOptions),
    get: <R extends object>(table: string, id: ShardflakeId) => getRow<R>(ctx, table, id),
    update: (table, id, changes) => updateRow(ctx, table, id, changes),
    delete: (table, id) => deleteRow(ctx, table, id),
    lookup: ((name: string, value: LookupValue, lookupOptions?: LookupOptions) =>
      lookups.lookup(name, value, lookupOptions)) as Router['lookup'],
    lookupMany: (name, values) => lookups.lookupMany(name, values),
    insertMany: (table, rows, manyOptions) =>
      lookupTables.has(table)
        ? insertManyKept(ctx, table, rows, manyOptions)
        : insertMany(ctx, table, rows, manyOptions),
    feed: <R extends object>(table: string, feedOptions: FeedOptions) => feed<R>(ctx, table, feedOptions),
    withShard: (target, fn, sessionOptions) =>
      // A router with lookups writes through a cross transaction, which can join the entries' shards at commit.
      lookupTables.size > 0 && !sessionOptions?.readOnly
        ? withShardKept(ctx, target, fn)
        : withShard(ctx, target, fn, sessionOptions),
    query: <R extends object>(query: MergedQuery) => queryMerged<R>(ctx, query),
    queryByShard: <R extends object>(query: ShardQuery) => queryByShard<R>(ctx, query),
    // The SQL module (and its parser, ≈ 1 s to load) is loaded on the first call only.
    sql: async (text, values, sqlOptions) =>
      (await import('../sql/index.js')).runSql(ctx, text, values, sqlOptions),
    async *sqlStream(text, values, streamOptions) {
      yield* (await import('../sql/index.js')).streamSql(ctx, text, values, streamOptions);
    },
    withReference: async (fn) =>
      // While an adoption serves every shard from the source, the source's own tables are the reference tables.
      (await map.fresh()).adoption?.servingFromSource
        ? withShard(ctx, { shard: 0 }, (s) =>
            fn({ servers: [s.server], query: (text, values) => s.query(text, values) }),
          )
        : withReference(ctx, referenceTargets, fn),
    withShards: (targets, fn, shardsOptions) => withShardsKept(ctx, targets, fn, shardsOptions),
    recoverTransactions: () => transactions.recover(),
    readToken: () => ctx.positions.toToken(),
    observe: (token) => ctx.positions.merge(ReadPositions.fromToken(token)),
    async refresh() {
      await map.reload();
    },
    async close() {
      await deadlocks.close();
      await transactions.close();
      await map.close();
      await Promise.all([...servers.values(), ...commitServers.values()].map((s) => s.end().catch(() => {})));
    },
  };
  // What the router may do is checked with the shard schemas' prefix the catalog gives (whatever a short config
  // says); a role that cannot even read the catalog is told so in the same one line.
  const privileges = (schemaPrefix: string) =>
    opts.checkPrivileges ? checkPrivileges({ ...config, schemaPrefix }, 'router') : Promise.resolve();
  try {
    const state = await map.fresh().catch(async (error: unknown) => {
      if ((error as { sqlState?: string }).sqlState === '42501')
        await privileges(config.schemaPrefix ?? DEFAULT_SCHEMA_PREFIX);
      throw error;
    });
    const drift = configDrift(config, state);
    if (drift)
      throw new ShardflakeError('INVALID_CONFIG', `${sourceOf(config)}${drift}; the router does not start`);
    await privileges(state.schemaPrefix);
  } catch (error) {
    await router.close();
    throw error;
  }
  await checkServersAtStart(Object.keys(config.servers), (server) => ctx.nodes(server));
  transactions.start();
  return router;
}

/** How long a router's start waits for its first look at every server (fence on discovery, strays.ts). */
const START_CHECK_MS = 1000;

/**
 * At start, one connection to every server the config names, each checked for stray copies (strays.ts) before
 * the router serves anything: a node promoted while no router ran is fenced now rather than at its first use.
 * Bounded: a server that does not answer is checked when it is first used.
 */
async function checkServersAtStart(names: readonly string[], nodes: (server: string) => ServerNodes) {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, START_CHECK_MS);
    timer.unref();
  });
  const checks = Promise.allSettled(
    names.map(async (server) => (await nodes(server).acquire({ intent: 'write' })).release()),
  );
  await Promise.race([checks, bound]);
  clearTimeout(timer);
}
