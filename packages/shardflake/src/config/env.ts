import { ShardflakeError } from '../errors/errors.js';

/**
 * `${NAME}` in a config URL is the environment variable NAME, so passwords (or whole hosts) need not live in the
 * file: `"postgres://app:${DB_PASSWORD}@db1:5432/app"`. A variable that is not set is INVALID_CONFIG naming the
 * variable — never its value, nor the URL's other secrets. A value substituted into the user or password part is
 * percent-encoded (a password holding `@` or `/` stays one password); elsewhere (host, port, database, options) it
 * is put in as written. A URL with no password at all is left to libpq's own rules, which pg follows: PGPASSWORD,
 * then the pgpass file (PGPASSFILE or ~/.pgpass).
 */
const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

export function expandEnv(
  url: string,
  where: string,
  source: string,
  env: NodeJS.ProcessEnv = process.env,
): string {
  if (!url.includes('${')) return url;
  const scheme = url.indexOf('://');
  const rest = scheme < 0 ? url : url.slice(scheme + 3);
  const authorityEnd = rest.search(/[/?#]/);
  const authority = authorityEnd < 0 ? rest : rest.slice(0, authorityEnd);
  // The user and password are the authority up to its last `@` (a substituted value cannot add one: it is encoded).
  const userinfoEnd = (scheme < 0 ? 0 : scheme + 3) + Math.max(authority.lastIndexOf('@'), 0);
  return url.replace(VARIABLE, (_, name: string, offset: number) => {
    const value = env[name];
    if (value === undefined) {
      throw new ShardflakeError(
        'INVALID_CONFIG',
        `${source}: ${where} names the environment variable ${name} (\${${name}}), which is not set`,
      );
    }
    return offset < userinfoEnd ? encodeURIComponent(value) : value;
  });
}
