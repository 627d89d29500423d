import * as v from 'valibot';
import { ShardflakeError } from '../errors/errors.js';
import { describeUrl } from '../postgres/connect.js';
import { expandEnv } from './env.js';
import { mapOf } from './fields.js';

/**
 * The config's servers (SPEC §2): each server's name → one postgres:// URL, or a non-empty list of node URLs (a
 * primary and its streaming replicas, in any order: roles are found at run time with pg_is_in_recovery(), see
 * roles.ts). A URL may hold `${VAR}` (config-env.ts). Only what can be seen without connecting is checked here.
 */

// A URL as written: postgres:// or postgresql://, or a `${VAR}` that will hold the whole URL or its start.
const WRITTEN_URL = /^(postgres(ql)?:\/\/|\$\{)/;
const URL_MESSAGE = 'needs a postgres:// URL';
const NODES_MESSAGE =
  'needs a postgres:// URL or a non-empty list of node URLs (a primary and its streaming replicas)';

const nodeUrl = v.pipe(v.string(URL_MESSAGE), v.regex(WRITTEN_URL, URL_MESSAGE));

export const serversFields = {
  servers: v.pipe(
    mapOf(
      v.pipe(
        v.string(),
        v.regex(/^[A-Za-z0-9_-]{1,63}$/, 'is not a good server name: use 1–63 letters, digits, _ or -'),
      ),
      v.union(
        [nodeUrl, v.pipe(v.array(nodeUrl, NODES_MESSAGE), v.minLength(1, NODES_MESSAGE))],
        NODES_MESSAGE,
      ),
      'must map each server name to a postgres:// URL or a list of node URLs',
    ),
    v.minEntries(1, 'must map at least one server name to a postgres:// URL'),
    v.description(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: ${VAR} is the config's own syntax, shown to the reader
      'Each server name → its postgres:// URL, or a list of node URLs (a primary and its streaming replicas). ${VAR} in a URL is the environment variable VAR; a URL without a password uses PGPASSWORD or the pgpass file.',
    ),
  ),
};

type ServersFields = v.InferOutput<v.ObjectSchema<typeof serversFields, undefined>>;

export interface ResolvedServers {
  /** Each server's first node URL (its primary when the config lists several): for display and one-node code. */
  servers: Record<string, string>;
  /** Every node URL of each server, in config order. */
  nodes: Record<string, string[]>;
}

function bad(source: string, message: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${source}: ${message}`);
}

/**
 * The second pass over `servers`: `${VAR}`s expanded, each URL well formed once expanded, and no node listed twice
 * (under one server or two: two servers on one node would put one shard's two copies on the same database).
 */
export function resolveServers(
  fields: ServersFields,
  source: string,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedServers {
  const servers: Record<string, string> = {};
  const nodes: Record<string, string[]> = {};
  const serverOfUrl = new Map<string, string>();
  for (const [name, value] of Object.entries(fields.servers)) {
    const list = typeof value === 'string' ? [value] : value;
    const urls = list.map((written, i) => {
      const where = `servers.${name}${typeof value === 'string' ? '' : `[${i}]`}`;
      const url = expandEnv(written, where, source, env);
      if (!/^postgres(ql)?:\/\//.test(url)) throw bad(source, `${where} ${URL_MESSAGE}`);
      try {
        new URL(url);
      } catch {
        throw bad(source, `${where} has a malformed URL ${describeUrl(url)}`);
      }
      const other = serverOfUrl.get(url);
      if (other !== undefined) {
        throw bad(
          source,
          other === name
            ? `servers.${name} lists node ${describeUrl(url)} twice`
            : `node ${describeUrl(url)} is listed under both servers.${other} and servers.${name}`,
        );
      }
      serverOfUrl.set(url, name);
      return url;
    });
    servers[name] = urls[0] as string;
    nodes[name] = urls;
  }
  return { servers, nodes };
}
