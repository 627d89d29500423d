import type pg from 'pg';
import { readShardMap, type ShardPlacement } from '../catalog/shards.js';
import type { ClusterConfig } from '../config/config.js';
import { connect } from '../postgres/connect.js';
import { primaryUrl } from '../topology/connections.js';

/**
 * The cluster's servers as the adoption writes them: where each shard lives (the catalog's real placement, not the
 * routers' view of the source), and connections in `session_replication_role = replica` (the copy and the stream
 * write entries themselves; shard triggers and foreign keys stay quiet, as under logical replication).
 */
export class Targets {
  readonly servers: string[];
  private readonly idle = new Map<string, pg.Client[]>();
  private readonly waiting = new Map<string, ((c: pg.Client) => void)[]>();
  private readonly open: pg.Client[] = [];
  private readonly made = new Map<string, number>();

  private constructor(
    private readonly config: ClusterConfig,
    private readonly placements: ShardPlacement[],
    private readonly perServer: number,
  ) {
    this.servers = [...new Set(placements.map((p) => p.server))].sort();
  }

  static async open(config: ClusterConfig, catalog: pg.ClientBase, perServer = 3): Promise<Targets> {
    const map = await readShardMap(catalog);
    const placements: ShardPlacement[] = [];
    for (const s of map.shards) placements[s.shard] = s;
    return new Targets(config, placements, perServer);
  }

  placement(shard: number): ShardPlacement {
    return this.placements[shard] as ShardPlacement;
  }

  /** Every shard on `server`. */
  shardsOn(server: string): ShardPlacement[] {
    return this.placements.filter((p) => p?.server === server);
  }

  /**
   * A new connection to `server` in replica mode (the caller ends it, or `close` does). `asyncCommit` only for the
   * copy, whose rows a crash may lose (a later synchronous commit on the server, the applied position, flushes
   * them before the copy counts as done): the stream's batches commit synchronously, since the slot is confirmed
   * after them.
   */
  async connect(
    server: string,
    applicationName = 'shardflake adopt',
    asyncCommit = false,
  ): Promise<pg.Client> {
    const client = await connect(await primaryUrl(this.config, server), { applicationName });
    this.open.push(client);
    await client.query(
      `SET session_replication_role = replica${asyncCommit ? '; SET synchronous_commit = off' : ''}`,
    );
    return client;
  }

  /** Runs `fn` on one of at most `perServer` copy connections of `server`. */
  async withCopier<T>(server: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
    let client = this.idle.get(server)?.pop();
    if (!client) {
      if ((this.made.get(server) ?? 0) < this.perServer) {
        this.made.set(server, (this.made.get(server) ?? 0) + 1);
        client = await this.connect(server, 'shardflake adopt copy', true);
      } else {
        client = await new Promise<pg.Client>((resolve) => {
          const list = this.waiting.get(server) ?? [];
          list.push(resolve);
          this.waiting.set(server, list);
        });
      }
    }
    try {
      return await fn(client);
    } finally {
      const next = this.waiting.get(server)?.shift();
      if (next) next(client);
      else {
        const list = this.idle.get(server) ?? [];
        list.push(client);
        this.idle.set(server, list);
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.open.map((c) => c.end().catch(() => {})));
  }
}
