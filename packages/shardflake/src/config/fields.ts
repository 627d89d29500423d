import * as v from 'valibot';
import { PLAIN_IDENTIFIER_RULE } from '../postgres/identifier.js';

/**
 * The building blocks the config's sections are written with (valibot schemas). Each section's module (config.ts,
 * config/servers.ts, tables-config.ts, config/reference.ts, config/lookups.ts) describes its own fields with them,
 * and config.ts composes the sections into the one schema that both validates a config and is turned into the
 * shipped JSON Schema (scripts/config-schema.mjs). So a schema here holds only what JSON Schema can say too (types,
 * patterns, ranges, required and unknown fields); what needs the rest of the config, the environment or an SQL
 * tokenizer is each section's second pass (its `resolve…` function), run on the shape this schema has accepted.
 *
 * Messages: an issue's message reads after its path, so config.ts prints `cluster.json: servers.b needs a
 * postgres:// URL …`. A message never quotes a server URL (it may hold a password).
 */

type AnyObjectSchema = v.GenericSchema<unknown, Record<string, unknown>>;

/**
 * valibot's object and record schemas take an array for an object (`typeof [] === 'object'`, its indexes as keys),
 * where JSON Schema's `"type": "object"` does not: `"servers": ["postgres://…"]` would be a server named "0". The
 * same schema, refusing arrays with its own type message; to-json-schema still sees the object or record inside.
 */
function noArrays<S extends AnyObjectSchema>(schema: S): S {
  return {
    ...schema,
    '~run'(dataset, config) {
      if (Array.isArray(dataset.value)) {
        v._addIssue(this as never, 'type', dataset, config);
        return dataset as never;
      }
      return schema['~run'](dataset, config);
    },
  };
}

/**
 * A JSON object with these fields and no others. `what` says what it should be (`must be an object { version, name,
 * sql }`); a missing field's message quotes its description, an unknown one lists the known fields.
 */
export function section<const E extends v.ObjectEntries>(entries: E, what: string) {
  const known = Object.keys(entries);
  return noArrays(
    v.strictObject(entries, (issue) => {
      const at = issue.path?.at(-1);
      if (issue.expected === 'never') {
        const meant = likelyMeant(String(at?.key), known);
        return `is not a known field${meant ? `: did you mean ${meant}?` : ''} (known: ${known.join(', ')})`;
      }
      if (at?.origin === 'key' && issue.input === undefined) {
        const missing = String(at.key);
        const entry = entries[missing];
        const description = entry ? v.getDescription(entry) : undefined;
        // A required field missing beside a field nobody knows that looks like it is a misspelling: say both.
        const typed = Object.keys((at.input as object | null) ?? {}).find(
          (key) => !known.includes(key) && likelyMeant(key, [missing]) === missing,
        );
        const hint = typed ? `, and ${typed} is not a known field: did you mean ${missing}?` : '';
        return `is missing${hint}${description ? ` (${description})` : ''}`;
      }
      return what;
    }),
  );
}

/**
 * The known field a typed one most likely means: the same name in another case, or one within a small edit
 * distance (1, or 2 for names of 8 characters or more: `logicalShard` → `logicalShards`, `tabels` → `tables`).
 * Undefined when none is close.
 */
export function likelyMeant(typed: string, known: readonly string[]): string | undefined {
  const lower = typed.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = name.toLowerCase() === lower ? 0 : editDistance(lower, name.toLowerCase());
    if (distance <= (Math.min(typed.length, name.length) >= 8 ? 2 : 1) && (!best || distance < best.distance))
      best = { name, distance };
  }
  return best?.name;
}

/** Levenshtein distance (insertions, deletions, substitutions, and a swap of two neighbours counted as one). */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) (rows[0] as number[])[j] = j;
  for (let i = 1; i <= a.length; i++) {
    const row = rows[i] as number[];
    const above = rows[i - 1] as number[];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d = Math.min(d, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      row[j] = d;
    }
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/** A JSON object mapping names (checked by `key`) to values (checked by `value`); `what` is its type message. */
export function mapOf<K extends v.GenericSchema<string, string>, V extends v.GenericSchema>(
  key: K,
  value: V,
  what: string,
) {
  return noArrays(v.record(key, value, what));
}

/**
 * A name that becomes a table in a schema: a plain SQL identifier in lower case (quoted everywhere, so a name must
 * read the same quoted and unquoted), not starting with shardflake's own prefix.
 */
export function tableName(what: string, reservedPrefix: string) {
  return v.pipe(
    v.string(),
    v.regex(
      new RegExp(`^(?!${reservedPrefix})[a-z_][a-z0-9_]{0,62}$`),
      `is not a good ${what}: it must be a plain SQL identifier in lower case (${PLAIN_IDENTIFIER_RULE}); names starting with ${reservedPrefix} are reserved for shardflake`,
    ),
  );
}

/** An SQL statement, or a non-empty list of them (each is checked by statement-rules.ts in the second pass). */
export function statements(description: string) {
  const message = 'must be an SQL statement or a non-empty list of statements';
  return v.pipe(
    v.union([v.string(), v.pipe(v.array(v.string(), message), v.minLength(1, message))], message),
    v.description(description),
  );
}

/**
 * A list of migrations `{ version, name, sql }`. The versions count up from 1 without gaps, which is checked by the
 * second pass (JSON Schema cannot compare an item with its index); `version` here is a whole number from 1.
 */
export function migrationList(description: string) {
  const versionMessage = 'must be a whole number from 1 (versions count up from 1 without gaps)';
  return v.pipe(
    v.array(
      section(
        {
          version: v.pipe(
            v.number(versionMessage),
            v.integer(versionMessage),
            v.minValue(1, versionMessage),
            v.description('1, 2, 3 … in order: the schema version this migration brings a shard to'),
          ),
          name: v.optional(v.pipe(v.string('must be a string'), v.description('A name for people'))),
          sql: statements(
            'The migration: one statement, or a list run in order in one transaction (CONCURRENTLY index builds: all of them or none)',
          ),
        },
        'must be an object { version, name, sql }',
      ),
      'must be a list of { version, name, sql }',
    ),
    v.description(description),
  );
}

/** The config's own path syntax: `servers.b[1]`, `lookups.user_email.column`, `tables["x y"]`. */
export function pathOf(issue: v.BaseIssue<unknown>): string {
  let path = '';
  for (const item of issue.path ?? []) {
    const key = item.key;
    if (typeof key === 'number') path += `[${key}]`;
    else if (typeof key === 'string' && /^[A-Za-z_$][A-Za-z0-9_$-]*$/.test(key))
      path += path === '' ? key : `.${key}`;
    else path += `[${JSON.stringify(String(key)).slice(0, 60)}]`;
  }
  return path;
}
