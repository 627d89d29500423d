import type { ShardflakeId } from 'shardflake';
import type { InstagramApp } from './app.js';

/**
 * A mixed workload against the example app: users sign up and follow each other, then `workers` concurrent
 * clients post photos, like photos and read feeds for `requests` requests. It keeps what was acknowledged, so a
 * caller can check the database against it (nothing lost, nothing doubled), and each request's latency.
 */
export interface WorkloadOptions {
  users?: number;
  /** Requests to run (more when `halfway` takes longer; see below). */
  requests?: number;
  workers?: number;
  /** Called once, when half of the requests are done (e.g. to move a shard in the middle of the workload). */
  halfway?: () => Promise<void>;
}

export interface WorkloadResult {
  users: ShardflakeId[];
  /** Acknowledged photos per user. */
  photosOf: Map<ShardflakeId, ShardflakeId[]>;
  /** Acknowledged new likes per photo. */
  likesOf: Map<ShardflakeId, number>;
  errors: unknown[];
  /** Requests run. */
  requests: number;
  latenciesMs: number[];
  seconds: number;
  /** performance.now() when the last request ended. */
  endedAt: number;
}

export async function runWorkload(app: InstagramApp, options: WorkloadOptions = {}): Promise<WorkloadResult> {
  const userCount = options.users ?? 40;
  const requests = options.requests ?? 1000;
  const workers = options.workers ?? 8;
  const users: ShardflakeId[] = [];
  for (let i = 0; i < userCount; i++) users.push(await app.createUser(`user${i}`));
  // Everyone follows the next five users.
  for (let i = 0; i < userCount; i++)
    for (let k = 1; k <= 5; k++)
      await app.follow(users[i] as ShardflakeId, users[(i + k) % userCount] as ShardflakeId);

  const photosOf = new Map<ShardflakeId, ShardflakeId[]>(users.map((u) => [u, []]));
  const allPhotos: ShardflakeId[] = [];
  const likesOf = new Map<ShardflakeId, number>();
  const errors: unknown[] = [];
  const latenciesMs: number[] = [];
  let next = 0;
  // With a `halfway` task the workload runs until that task is done and then a quarter of `requests` more, so the
  // task (a shard move) is surrounded by requests on both sides however long it takes.
  let target = requests;
  let halfway: Promise<void> | undefined;
  let halfwayDone = false;
  const started = performance.now();
  const worker = async () => {
    for (let i = next++; i < target || (halfway !== undefined && !halfwayDone); i = next++) {
      if (i === Math.floor(requests / 2) && options.halfway) {
        halfway = options.halfway().finally(() => {
          halfwayDone = true;
          target = Math.max(target, next + Math.floor(requests / 4));
        });
        // Its failure is reported by the `await halfway` below, once the requests are done.
        halfway.catch(() => {});
      }
      const user = users[(i * 7) % userCount] as ShardflakeId;
      const t = performance.now();
      try {
        const kind = i % 4;
        if (kind === 0 || allPhotos.length === 0) {
          const photo = await app.postPhoto(user, `photo ${i}`);
          photosOf.get(user)?.push(photo);
          allPhotos.push(photo);
        } else if (kind === 1 || kind === 2) {
          const photo = allPhotos[(i * 13) % allPhotos.length] as ShardflakeId;
          if (await app.like(user, photo)) likesOf.set(photo, (likesOf.get(photo) ?? 0) + 1);
        } else {
          await app.feed(user, 20);
        }
      } catch (error) {
        errors.push(error);
      }
      latenciesMs.push(performance.now() - t);
    }
  };
  await Promise.all(Array.from({ length: workers }, worker));
  const endedAt = performance.now();
  const seconds = (endedAt - started) / 1000;
  await halfway;
  return { users, photosOf, likesOf, errors, requests: latenciesMs.length, latenciesMs, seconds, endedAt };
}
