import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { isShardflakeError, redactSecrets } from '../../packages/shardflake/src/errors/errors.js';
import { describeUrl } from '../../packages/shardflake/src/postgres/connect.js';

/**
 * Passwords people type: letters and every character that ends a URL part or a conninfo word, spaces, and what
 * looks like the next keyword (` x=`, also after a quote) inside a quoted value. Forms that cannot hold a space
 * unquoted (URLs, bare words) drop them.
 */
const secret = fc
  .array(fc.constantFrom(...'abcXYZ019/@:?#&=%+,;!$\'"\\()[] '.split(''), ' x=', "' x="), {
    minLength: 10,
    maxLength: 24,
  })
  .map((chars) => chars.join(''))
  // Bracketed by markers that occur nowhere else in the forms below.
  .map((s) => `Qz${s}Wq`);

/** Every form a password reaches a message in; each is a (text, password-as-written) pair. */
const forms: ((pw: string) => string)[] = [
  (pw) => `postgres://app:${pw.replace(/\s/g, '')}@db.example:5432/app`, // raw, even with / @ : ? #
  (pw) => `could not connect to postgresql://app:${encodeURIComponent(pw)}@10.0.0.1/app: timeout`,
  (pw) => `postgres://app@db/app?sslmode=require&password=${encodeURIComponent(pw)}&connect_timeout=5`,
  (pw) => `postgres://app@db/app?sslpassword=${encodeURIComponent(pw)}`,
  (pw) => `"postgres://app:${pw.replace(/\s/g, '')}@db/app"`,
  (pw) => `host=db port=5432 password=${pw.replace(/\s/g, '')} dbname=app`,
  (pw) => `host=db password = '${pw.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}' user=app`,
  (pw) => `host=db password='${pw.replace(/'/g, "''")}' user=app`,
  (pw) => `PGPASSWORD=${pw.replace(/\s/g, '')} psql -h db`,
  (pw) => `host=db password='${pw.replace(/'/g, "''")}' then postgres://u:${encodeURIComponent(pw)}@h/db`,
];

test('no URL, query parameter or key=value form keeps its password through redaction', () => {
  fc.assert(
    fc.property(secret, fc.integer({ min: 0, max: forms.length - 1 }), (pw, i) => {
      const text = (forms[i] as (pw: string) => string)(pw);
      const out = redactSecrets(text);
      // The password is bracketed by Qz…Wq, found nowhere else in the forms: neither end may survive, so a
      // redaction that stops at some character inside the password (and leaks the rest) fails too.
      assert.ok(!out.includes('Qz') && !out.includes('Wq'), `form ${i} leaked part of the password`);
      assert.ok(!out.includes(pw) && !out.includes(encodeURIComponent(pw)), `form ${i} leaked the password`);
      assert.ok(out.includes('****'), `form ${i} shows where the password was`);
    }),
    { numRuns: 2000 },
  );
});

test('a key=value password that looks like a URL is masked whole, not read as a URL', () => {
  // Found by the property above on a seed that drew `://` into a password (the URL token started inside the value).
  for (const text of [
    'host=db port=5432 password=Qzaaaa://aaaWq dbname=app',
    "host=db password = 'Qzab://c\\'dWq' user=app",
    "host=db password='Qzab://c''dWq' user=app",
    'PGPASSWORD=Qzx+y://z@hWq psql -h db',
    // A quoted value holding what looks like the next keyword (it used to end there and leak the rest), in both
    // escaping conventions, and one that reads differently in each (the longer reading wins).
    "host=db password='Qzab\\' x=cdWq' user=app",
    "host=db password='Qzab'' x=cdWq' user=app",
    "host=db password='Qzab\\'' x=cdWq' user=app",
  ]) {
    const out = redactSecrets(text);
    assert.ok(!out.includes('Qz') && !out.includes('Wq'), `leaked: ${text}`);
    assert.match(out, /password\s*=\s*\*\*\*\*/i);
  }
});

test('what is not a secret stays readable', () => {
  assert.equal(
    redactSecrets('postgres://app:pw1234@db:5432/app?sslmode=require'),
    'postgres://app:****@db:5432/app?sslmode=require',
  );
  assert.equal(redactSecrets('postgres://db:5432/app?user=a'), 'postgres://db:5432/app?user=a');
  assert.equal(redactSecrets('host=db user=app dbname=x'), 'host=db user=app dbname=x');
  assert.equal(
    describeUrl('postgres://u:pw5678@h:5432/db?password=x1'),
    'postgres://u:****@h:5432/db?password=****',
  );
});

test('a malformed URL in a config is never echoed whole: only its scheme', () => {
  const pw = 'Sup3r/Secret@word';
  for (const url of [`postgres://app:${pw}@db:99999/app`, `postgres://app:${pw}@[db/app`]) {
    assert.throws(
      () =>
        validateConfig(
          {
            servers: { a: url },
            catalog: 'a',
            logicalShards: 4,
            tables: { t: 'CREATE TABLE t (id bigint PRIMARY KEY)' },
          },
          'cfg',
        ),
      (e) => {
        assert.ok(isShardflakeError(e, 'INVALID_CONFIG'));
        assert.ok(!e.message.includes('Secret') && !e.message.includes('Sup3r'), 'no part of the password');
        assert.match(e.message, /malformed URL postgres:\/\/… \(not shown: it does not parse\)/);
        return true;
      },
    );
  }
});
