import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { isShardflakeError } from 'shardflake';
import { validateConfig } from '../../packages/shardflake/src/config/config.js';
import { jsonSchemaErrors, SHIPPED_SCHEMA_FILE } from '../support/config-json-schema.js';
import { badMeanings, badShapes, base } from './config-cases.js';

/**
 * The JSON Schema shipped as `shardflake/config.schema.json` is made from the validator's own definition
 * (scripts/config-schema.mjs, run by the build): the file in the repository is what the definition makes now, a
 * real JSON Schema validator (ajv) refuses every bad shape the validator refuses, and what it cannot see (names
 * pointing nowhere, versions out of order) is left to the validator. That it accepts every config the docs show is
 * test/docs/configs.validate.
 */
const { configSchemaText, SCHEMA_FILE } = (await import(
  pathToFileURL(resolve('scripts/config-schema.mjs')).href
)) as { configSchemaText: () => Promise<string>; SCHEMA_FILE: string };
const shipped = readFileSync(SCHEMA_FILE, 'utf8');

describe('config.schema.json', () => {
  it('is what the definition makes now (the build writes it; this catches a stale copy)', async () => {
    assert.equal(resolve(SHIPPED_SCHEMA_FILE), SCHEMA_FILE);
    assert.equal(shipped, await configSchemaText());
  });

  it('is in the package: exported as shardflake/config.schema.json and in its files', () => {
    const manifest = JSON.parse(readFileSync('packages/shardflake/package.json', 'utf8'));
    assert.equal(manifest.exports['./config.schema.json'], './config.schema.json');
    assert.ok(manifest.files.includes('config.schema.json'));
  });

  it('accepts "$schema" pointing at itself, and the bare base config', () => {
    const config = { $schema: './node_modules/shardflake/config.schema.json', ...base };
    assert.equal(jsonSchemaErrors(config), null);
    assert.equal(jsonSchemaErrors(base), null);
  });

  it('refuses every bad shape the validator refuses', () => {
    for (const [what, config] of badShapes) {
      assert.notEqual(jsonSchemaErrors(config), null, `the JSON Schema takes ${what}`);
      assert.throws(() => validateConfig(config, 'cluster.json'), isShardflakeError, what);
    }
  });

  it('leaves to the validator what needs the rest of the config (and the validator refuses it)', () => {
    for (const [what, config] of badMeanings) {
      assert.equal(jsonSchemaErrors(config), null, what);
      assert.throws(() => validateConfig(config, 'cluster.json'), isShardflakeError, what);
    }
  });
});
