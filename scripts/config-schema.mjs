#!/usr/bin/env node
// The cluster config's JSON Schema, made from the same valibot definition that validates a config
// (packages/shardflake/src/config/config.ts `configSchema`, composed of each section's fields), and shipped in the
// package as `shardflake/config.schema.json` for editors (`"$schema": "./node_modules/shardflake/config.schema.json"`).
// The build runs it after tsc (it reads the compiled definition), so the shipped file cannot drift from the
// validator; test/cluster/config.json-schema-*.test.ts checks the file in the repository against it too.
//
//   node scripts/config-schema.mjs           write packages/shardflake/config.schema.json
//   node scripts/config-schema.mjs --check   exit 1 when the file differs from what the definition makes
//
// What JSON Schema cannot say (versions counting 1, 2, 3; the catalog naming a listed server; statements that stay in
// their shard's schema; a lookup's table being one of the tables) is the validator's second pass, not in this file.
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { toJsonSchema } from '@valibot/to-json-schema';

export const SCHEMA_FILE = resolve(import.meta.dirname, '../packages/shardflake/config.schema.json');

/** The JSON Schema text of the config, as the current build's definition makes it. */
export async function configSchemaText() {
  const { configSchema } = await import(
    pathToFileURL(resolve(import.meta.dirname, '../packages/shardflake/dist/config/config.js')).href
  );
  // errorMode 'throw': a schema or action with no JSON Schema form fails the build instead of being left out.
  const schema = toJsonSchema(configSchema, { target: 'draft-07', errorMode: 'throw' });
  const text = JSON.stringify(
    {
      $schema: schema.$schema,
      title: 'shardflake cluster config',
      ...schema,
    },
    null,
    2,
  );
  return `${text}\n`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const text = await configSchemaText();
  if (process.argv.includes('--check')) {
    if (readFileSync(SCHEMA_FILE, 'utf8') !== text) {
      console.error(
        `config-schema: ${SCHEMA_FILE} differs from the definition; run node scripts/config-schema.mjs`,
      );
      process.exit(1);
    }
  } else {
    writeFileSync(SCHEMA_FILE, text);
  }
}
