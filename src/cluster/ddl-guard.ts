import { ShardflakeError } from '../errors.js';

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
 *    ALTER … SET SCHEMA), `TEMP`/`TEMPORARY`/`pg_temp` (temporary tables live in another schema), `dblink`, and
 *    `CONCURRENTLY` (cannot run inside the shard's transaction).
 * 4. No dollar-quoted bodies (`$$ … $$`): table DDL never needs one, and they would hide code from rules 1–3.
 * 5. The statement starts with CREATE/ALTER/DROP TABLE, CREATE [UNIQUE] INDEX, ALTER/DROP INDEX, CREATE/ALTER/DROP
 *    SEQUENCE, CREATE/DROP VIEW, COMMENT ON, or (for data migrations) INSERT/UPDATE/DELETE — so SET, RESET, DO,
 *    BEGIN/COMMIT, COPY, CALL, GRANT and function or trigger definitions are all refused.
 *
 * The config's author is trusted; the rules stop mistakes that would put one shard's objects in a shared schema.
 */

interface Token {
  kind: 'word' | 'quoted' | 'symbol' | 'literal';
  text: string;
}

const FORBIDDEN_WORDS = [
  'search_path',
  'set_config',
  'schema',
  'temp',
  'temporary',
  'pg_temp',
  'concurrently',
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
      tokens.push({ kind: 'literal', text: sql.slice(i, j + 1) });
      i = j + 1;
    } else if (c === '"') {
      let j = i + 1;
      for (;;) {
        if (j >= sql.length) throw refuse(where, 'has an unterminated quoted identifier');
        if (sql[j] === '"' && sql[j + 1] === '"') j += 2;
        else if (sql[j] === '"') break;
        else j++;
      }
      tokens.push({ kind: 'quoted', text: sql.slice(i + 1, j).replaceAll('""', '"') });
      i = j + 1;
    } else if (c === '$' && !/[0-9]/.test(next ?? '')) {
      throw refuse(where, 'uses a dollar-quoted body ($$ … $$), which table statements never need');
    } else if (/[A-Za-z_\u0080-\uffff]/.test(c)) {
      let j = i + 1;
      while (j < sql.length && /[A-Za-z0-9_$\u0080-\uffff]/.test(sql[j] as string)) j++;
      tokens.push({ kind: 'word', text: sql.slice(i, j) });
      i = j;
    } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(next ?? ''))) {
      // Numbers (including 1.5 and .5) are literals, so their dot is not a qualifier.
      let j = i + 1;
      while (j < sql.length && /[0-9.eE]/.test(sql[j] as string)) j++;
      tokens.push({ kind: 'literal', text: sql.slice(i, j) });
      i = j;
    } else {
      tokens.push({ kind: 'symbol', text: c });
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
