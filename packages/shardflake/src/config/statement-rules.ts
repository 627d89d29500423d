import { ShardflakeError } from '../errors/errors.js';
import { validateIdentifier } from '../postgres/identifier.js';

/**
 * Table and migration statements from a cluster config run inside one logical shard's schema, with `search_path`
 * set to that schema alone, so `next_id()` and every unqualified name bind to that shard. A statement may not
 * reach out of its schema. The rules, checked on a token stream (string literals, quoted identifiers and comments
 * are skipped correctly, so a `;` or a dot inside a literal is harmless):
 *
 * 1. One statement per string: no `;` except one trailing.
 * 2. No qualified names (`other.photos`, `"public".t`, `pg_catalog.set_config`): a name followed by `.` names
 *    another schema (or a column of another table, which a DDL statement never needs).
 * 3. None of the words that change where names go: `search_path`, `set_config`, `SCHEMA` (CREATE SCHEMA,
 *    ALTER … SET SCHEMA), `TEMP`/`TEMPORARY`/`pg_temp` (temporary tables live in another schema), `dblink`.
 * 4. No dollar-quoted bodies (`$$ … $$`): table DDL never needs one, and they would hide code from rules 1–3.
 * 5. The statement starts with CREATE/ALTER/DROP TABLE, CREATE [UNIQUE] INDEX, ALTER/DROP INDEX, CREATE/ALTER/DROP
 *    SEQUENCE, CREATE/DROP VIEW, COMMENT ON, or (for data migrations) INSERT/UPDATE/DELETE — so SET, RESET, DO,
 *    BEGIN/COMMIT, COPY, CALL, GRANT and function or trigger definitions are all refused.
 * 6. `CONCURRENTLY` only as `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON …` or
 *    `DROP INDEX CONCURRENTLY [IF EXISTS] name [RESTRICT]`, with a plain index name: such a statement cannot run in
 *    a transaction, so `cluster migrate` runs it alone and makes it idempotent by looking the index up by name
 *    (see migrate-concurrently.ts). REINDEX … CONCURRENTLY, DETACH PARTITION … CONCURRENTLY and nameless builds are
 *    refused. Whether a CONCURRENTLY statement may appear at all (only in a migration of its own) is config.ts's
 *    rule.
 *
 * The config's author is trusted; the rules stop mistakes that would put one shard's objects in a shared schema.
 */

interface Token {
  kind: 'word' | 'quoted' | 'symbol' | 'literal';
  text: string;
  /** Where the token starts and ends in the statement's text. */
  start: number;
  end: number;
}

const FORBIDDEN_WORDS = [
  'search_path',
  'set_config',
  'schema',
  'temp',
  'temporary',
  'pg_temp',
  'dblink',
] as const;

const ALLOWED_STARTS = [
  ['create', 'table'],
  ['create', 'unlogged', 'table'],
  ['create', 'index'],
  ['create', 'unique', 'index'],
  ['create', 'sequence'],
  ['create', 'view'],
  ['alter', 'table'],
  ['alter', 'index'],
  ['alter', 'sequence'],
  ['drop', 'table'],
  ['drop', 'index'],
  ['drop', 'sequence'],
  ['drop', 'view'],
  ['comment', 'on'],
  ['insert'],
  ['update'],
  ['delete'],
] as const;

function refuse(where: string, why: string): ShardflakeError {
  return new ShardflakeError('INVALID_CONFIG', `${where}: ${why}`);
}

/** Splits SQL into tokens; throws on an unterminated literal or a dollar-quoted body. */
export function tokenize(sql: string, where: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i] as string;
    const next = sql[i + 1];
    if (/\s/.test(c)) {
      i++;
    } else if (c === '-' && next === '-') {
      const end = sql.indexOf('\n', i);
      i = end === -1 ? sql.length : end + 1;
    } else if (c === '/' && next === '*') {
      const end = sql.indexOf('*/', i + 2);
      if (end === -1) throw refuse(where, 'has an unterminated /* comment');
      i = end + 2;
    } else if (c === "'" || ((c === 'E' || c === 'e') && next === "'")) {
      // A string literal; '' is an escaped quote. E'…' strings may also escape with a backslash.
      const escapes = c !== "'";
      let j = escapes ? i + 2 : i + 1;
      for (;;) {
        if (j >= sql.length) throw refuse(where, 'has an unterminated string literal');
        if (escapes && sql[j] === '\\') j += 2;
        else if (sql[j] === "'" && sql[j + 1] === "'") j += 2;
        else if (sql[j] === "'") break;
        else j++;
      }
      tokens.push({ kind: 'literal', text: sql.slice(i, j + 1), start: i, end: j + 1 });
      i = j + 1;
    } else if (c === '"') {
      let j = i + 1;
      for (;;) {
        if (j >= sql.length) throw refuse(where, 'has an unterminated quoted identifier');
        if (sql[j] === '"' && sql[j + 1] === '"') j += 2;
        else if (sql[j] === '"') break;
        else j++;
      }
      tokens.push({ kind: 'quoted', text: sql.slice(i + 1, j).replaceAll('""', '"'), start: i, end: j + 1 });
      i = j + 1;
    } else if (c === '$' && !/[0-9]/.test(next ?? '')) {
      throw refuse(where, 'uses a dollar-quoted body ($$ … $$), which table statements never need');
    } else if (/[A-Za-z_\u0080-\uffff]/.test(c)) {
      let j = i + 1;
      while (j < sql.length && /[A-Za-z0-9_$\u0080-\uffff]/.test(sql[j] as string)) j++;
      tokens.push({ kind: 'word', text: sql.slice(i, j), start: i, end: j });
      i = j;
    } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(next ?? ''))) {
      // Numbers (including 1.5 and .5) are literals, so their dot is not a qualifier.
      let j = i + 1;
      while (j < sql.length && /[0-9.eE]/.test(sql[j] as string)) j++;
      tokens.push({ kind: 'literal', text: sql.slice(i, j), start: i, end: j });
      i = j;
    } else {
      tokens.push({ kind: 'symbol', text: c, start: i, end: i + 1 });
      i++;
    }
  }
  return tokens;
}

function isName(t: Token | undefined): boolean {
  return t !== undefined && (t.kind === 'word' || t.kind === 'quoted');
}

export interface CheckedStatement {
  /** The statement without a trailing `;`. */
  sql: string;
  /** For CREATE TABLE: the table's name. */
  createsTable?: string;
  /** For a CREATE/DROP INDEX CONCURRENTLY: what `cluster migrate` needs to run it outside a transaction. */
  concurrent?: ConcurrentIndexStatement;
}

/** A statement that builds or drops one index CONCURRENTLY (rule 6). */
export interface ConcurrentIndexStatement {
  action: 'create' | 'drop';
  /** The index's name as PostgreSQL stores it (an unquoted name folded to lower case). */
  index: string;
  /** The statement as written, without a trailing `;`. */
  sql: string;
  /**
   * The same statement without CONCURRENTLY. A shard created later (init, or the target of a move) runs every
   * migration inside its creation transaction, on empty tables, where a plain build is just as good.
   */
  inTransaction: string;
}

const CONCURRENT_FORMS =
  'CONCURRENTLY is allowed only as CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON … or DROP INDEX CONCURRENTLY [IF EXISTS] name';

const lowerWord = (t: Token | undefined) => (t?.kind === 'word' ? t.text.toLowerCase() : '');

/** Rule 6: the one index a CONCURRENTLY statement builds or drops, or a refusal. */
function concurrentForm(sql: string, body: Token[], where: string): ConcurrentIndexStatement | undefined {
  const at = body.flatMap((t, i) => (lowerWord(t) === 'concurrently' ? [i] : []));
  if (at.length === 0) return undefined;
  const words = body.map(lowerWord);
  const create = words[0] === 'create';
  const indexAt = create && words[1] === 'unique' ? 2 : 1;
  const shapeOk =
    at.length === 1 && (create || words[0] === 'drop') && words[indexAt] === 'index' && at[0] === indexAt + 1;
  if (!shapeOk) throw refuse(where, CONCURRENT_FORMS);
  let nameAt = indexAt + 2;
  const guard = create ? ['if', 'not', 'exists'] : ['if', 'exists'];
  if (guard.every((w, i) => words[nameAt + i] === w)) nameAt += guard.length;
  const name = body[nameAt];
  if (!isName(name) || (name?.kind === 'word' && words[nameAt] === 'on')) {
    throw refuse(
      where,
      `${CONCURRENT_FORMS}: the index must be named, because a build left invalid by a crash is found by its name`,
    );
  }
  const token = name as Token;
  // PostgreSQL folds an unquoted name to lower case (ASCII letters only).
  const index = token.kind === 'word' ? token.text.replace(/[A-Z]/g, (c) => c.toLowerCase()) : token.text;
  try {
    validateIdentifier(index, 'index name');
  } catch (error) {
    throw refuse(where, (error as Error).message);
  }
  const rest = body.slice(nameAt + 1);
  if (create && lowerWord(rest[0]) !== 'on')
    throw refuse(where, `${CONCURRENT_FORMS}: ON must follow the name`);
  if (!create && !(rest.length === 0 || (rest.length === 1 && lowerWord(rest[0]) === 'restrict'))) {
    throw refuse(
      where,
      `${CONCURRENT_FORMS}: one index at a time, without CASCADE (PostgreSQL allows no more)`,
    );
  }
  const word = body[at[0] as number] as Token;
  const trimmed = (text: string) => text.trim().replace(/;\s*$/, '');
  return {
    action: create ? 'create' : 'drop',
    index,
    sql: trimmed(sql),
    inTransaction: trimmed(`${sql.slice(0, word.start).trimEnd()} ${sql.slice(word.end).trimStart()}`),
  };
}

/** Checks one statement against the rules above; returns it without its trailing `;`. */
export function checkShardStatement(sql: string, where: string): CheckedStatement {
  if (typeof sql !== 'string' || sql.trim() === '') throw refuse(where, 'must be a non-empty SQL string');
  const tokens = tokenize(sql, where);
  const semis = tokens.flatMap((t, i) => (t.kind === 'symbol' && t.text === ';' ? [i] : []));
  if (semis.length > 1 || (semis.length === 1 && semis[0] !== tokens.length - 1)) {
    throw refuse(where, 'holds more than one statement (no ";" except at the end; use a list for several)');
  }
  const body = semis.length === 1 ? tokens.slice(0, -1) : tokens;
  for (let i = 0; i < body.length; i++) {
    const t = body[i] as Token;
    if (isName(t) && body[i + 1]?.kind === 'symbol' && body[i + 1]?.text === '.') {
      throw refuse(
        where,
        `names ${JSON.stringify(`${t.text}.${body[i + 2]?.text ?? ''}`)}; statements run inside their shard's schema and may not use schema-qualified names`,
      );
    }
    const lower = t.text.toLowerCase();
    if (t.kind === 'word' && (FORBIDDEN_WORDS as readonly string[]).includes(lower)) {
      throw refuse(
        where,
        `uses ${JSON.stringify(t.text)}, which could act outside the shard's schema (refused words: ${FORBIDDEN_WORDS.join(', ')})`,
      );
    }
    if (t.kind === 'quoted' && ['search_path', 'pg_temp'].includes(lower)) {
      throw refuse(where, `names ${JSON.stringify(t.text)}, which could act outside the shard's schema`);
    }
  }
  // Before the list of allowed statements, so REINDEX … CONCURRENTLY hears about the CONCURRENTLY rule.
  const concurrent = concurrentForm(sql, body, where);
  const words = body.slice(0, 3).map((t) => (t.kind === 'word' ? t.text.toLowerCase() : ''));
  const allowed = ALLOWED_STARTS.some((start) => start.every((w, i) => words[i] === w));
  if (!allowed) {
    throw refuse(
      where,
      `must be a table, index, sequence or view statement (CREATE/ALTER/DROP …), COMMENT ON, or INSERT/UPDATE/DELETE; it starts with ${JSON.stringify(
        body
          .slice(0, 2)
          .map((t) => t.text)
          .join(' '),
      )}`,
    );
  }
  const result: CheckedStatement = { sql: sql.trim().replace(/;\s*$/, '') };
  if (concurrent) result.concurrent = concurrent;
  if (words[0] === 'create') {
    const tableAt = body.findIndex((t) => t.kind === 'word' && t.text.toLowerCase() === 'table');
    if (tableAt !== -1 && tableAt <= 2) {
      let nameAt = tableAt + 1;
      const maybe = body.slice(nameAt, nameAt + 3).map((t) => t.text.toLowerCase());
      if (maybe[0] === 'if' && maybe[1] === 'not' && maybe[2] === 'exists') nameAt += 3;
      const name = body[nameAt];
      if (!isName(name)) throw refuse(where, 'CREATE TABLE needs a table name');
      result.createsTable =
        (name as Token).kind === 'word' ? (name as Token).text.toLowerCase() : (name as Token).text;
    }
  }
  return result;
}
