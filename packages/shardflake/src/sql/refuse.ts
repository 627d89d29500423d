import { ShardflakeError } from '../errors/errors.js';

/** Refuses a query router.sql cannot answer exactly: nothing has been sent to a server when this is thrown. */
export function unsupported(what: string): never {
  throw new ShardflakeError('UNSUPPORTED_QUERY', `router.sql cannot answer this across shards: ${what}`);
}
