import { shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';

/**
 * The one place where names become SQL. A name must be a plain identifier (letter or underscore, then letters,
 * digits or underscores, at most 63 bytes — Postgres's NAMEDATALEN limit) and is always double-quoted, so a
 * hostile name can neither escape its quotes nor be silently truncated into another object's name.
 */
export const PLAIN_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
/** What PLAIN_IDENTIFIER allows, in words for messages. */
export const PLAIN_IDENTIFIER_RULE =
  'letters, digits and _, starting with a letter or _, at most 63 characters';

/**
 * Returns `name` when it is a plain SQL identifier (letters, digits and _, not starting with a digit, at most 63
 * characters), else throws INVALID_IDENTIFIER naming `what`.
 */
export function validateIdentifier(name: string, what = 'identifier'): string {
  if (typeof name !== 'string' || !PLAIN_IDENTIFIER.test(name)) {
    throw new ShardflakeError(
      'INVALID_IDENTIFIER',
      `${what} ${shown(name, 80)} is not a plain SQL identifier (${PLAIN_IDENTIFIER_RULE})`,
    );
  }
  return name;
}

/** `quoteIdent('insta5')` → `"insta5"`; throws INVALID_IDENTIFIER for anything else than a plain identifier. */
export function quoteIdent(name: string, what?: string): string {
  return `"${validateIdentifier(name, what)}"`;
}

/** `qualified('insta5', 'next_id')` → `"insta5"."next_id"`. */
export function qualified(schema: string, name: string): string {
  return `${quoteIdent(schema, 'schema')}.${quoteIdent(name)}`;
}

/**
 * A SQL string literal (for the few places a value cannot be a bind parameter, such as DDL). Written in the
 * escape-string form `E'…'` with `\` and `'` doubled, which reads the same whatever `standard_conforming_strings`
 * says: a plain `'…'` would let a backslash escape the closing quote on a server that has it off. A NUL cannot be
 * in a PostgreSQL string, so it is refused here rather than by the server mid-statement.
 */
export function quoteLiteral(value: string): string {
  if (typeof value !== 'string' || value.includes('\0')) {
    throw new ShardflakeError('INVALID_ARGUMENT', 'a SQL string value must be text without NUL characters');
  }
  return `E'${value.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}
