import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { Ajv } from 'ajv';
import { isShardflakeError } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/cluster/config.js';
import { badMeanings, badShapes, base } from './config-cases.js';

/**
 * The JSON Schema shipped as `shardflake/config.schema.json` is made from the validator's own definition
 * (scripts/config-schema.mjs, run by the build): the file in the repository is what the definition makes now, a
 * real JSON Schema validator (ajv) accepts every config the docs show and refuses every bad shape the validator
 * refuses, and what it cannot see (names pointing nowhere, versions out of order) is left to the validator.
 */
const { configSchemaText, SCHEMA_FILE } = (await import(
  pathToFileURL(resolve('scripts/config-schema.mjs')).href
)) as { configSchemaText: () => Promise<string>; SCHEMA_FILE: string };
const shipped = readFileSync(SCHEMA_FILE, 'utf8');
const validate = new Ajv({ allErrors: true }).compile(JSON.parse(shipped));
const errors = () => JSON.stringify(validate.errors ?? []);

/** Every ```json block of the README and docs/ that is a whole config, or a fragment of one (`"lookups": …`). */
function documentedConfigs(): { where: string; config: Record<string, unknown>; whole: boolean }[] {
  const pages = [
    'README.md',
    ...readdirSync('docs', { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.md'))
      .map((f) => join('docs', f)),
  ];
  return pages.flatMap((page) =>
    [...readFileSync(page, 'utf8').matchAll(/```json\n([\s\S]*?)```/g)].flatMap((m, i) => {
      const text = (m[1] ?? '').trim();
      const where = `${page} json block ${i + 1}`;
      const parsed = JSON.parse(text.startsWith('{') ? text : `{${text}}`) as Record<string, unknown>;
      const whole = 'servers' in parsed;
      const keys = Object.keys(parsed);
      const known = Object.keys(JSON.parse(shipped).properties);
      // A block of other JSON (a status output, a report) is not a config.
      if (!keys.every((k) => known.includes(k))) return [];
      return [{ where, config: whole ? parsed : { ...base, ...parsed }, whole }];
    }),
  );
}

describe('config.schema.json', () => {
  it('is what the definition makes now (the build writes it; this catches a stale copy)', async () => {
    assert.equal(shipped, await configSchemaText());
  });

  it('is in the package: exported as shardflake/config.schema.json and in its files', () => {
    const manifest = JSON.parse(readFileSync('packages/shardflake/package.json', 'utf8'));
    assert.equal(manifest.exports['./config.schema.json'], './config.schema.json');
    assert.ok(manifest.files.includes('config.schema.json'));
  });

  it('accepts every config the README and docs show, as the validator does', () => {
    const configs = documentedConfigs();
    assert.ok(configs.filter((c) => c.whole).length >= 2, 'the docs show whole configs');
    assert.ok(
      configs.some((c) => 'lookups' in c.config),
      'and the lookups fragment',
    );
    for (const { where, config, whole } of configs) {
      assert.ok(validate(config), `${where}: ${errors()}`);
      // A fragment sits on the test's base config, whose tables it may not name; a whole config must pass.
      if (whole) validateConfig(config, where);
    }
  });

  it('accepts "$schema" pointing at itself, and the bare base config', () => {
    const config = { $schema: './node_modules/shardflake/config.schema.json', ...base };
    assert.ok(validate(config), errors());
    assert.ok(validate(base), errors());
  });

  it('refuses every bad shape the validator refuses', () => {
    for (const [what, config] of badShapes) {
      assert.equal(validate(config), false, `the JSON Schema takes ${what}`);
      assert.throws(() => validateConfig(config, 'cluster.json'), isShardflakeError, what);
    }
  });

  it('leaves to the validator what needs the rest of the config (and the validator refuses it)', () => {
    for (const [what, config] of badMeanings) {
      assert.ok(validate(config), `${what}: ${errors()}`);
      assert.throws(() => validateConfig(config, 'cluster.json'), isShardflakeError, what);
    }
  });
});
