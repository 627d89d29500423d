import assert from 'node:assert/strict';
import { test } from 'node:test';
import { validateConfig } from 'shardflake';
import { jsonSchemaErrors } from '../support/config-json-schema.js';
import { type Block, pageBlocks, where } from './blocks.js';

// The config files the docs show are valid configs, for validateConfig and for the JSON Schema the package ships
// (what an editor checks them with): a whole file is validated as it is; a fragment (fields without the braces,
// such as a "migrations" list) is validated inside the page's first whole config, or, on a page without one,
// inside a config with the table the fragment names.
const USERS = {
  servers: { a: 'postgres://app@127.0.0.1:5432/app' },
  catalog: 'a',
  logicalShards: 16,
  tables: { users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id(), email text NOT NULL)' },
};

function check(blocks: Block[], base?: object): void {
  const whole = blocks.find((b) => b.code.trimStart().startsWith('{'));
  for (const block of blocks) {
    test(`${where(block)} is a config validateConfig and the shipped JSON Schema accept`, () => {
      const fields = block.code.trimStart().startsWith('{')
        ? JSON.parse(block.code)
        : { ...(whole ? JSON.parse(whole.code) : base), ...JSON.parse(`{${block.code}}`) };
      const config = validateConfig(fields, where(block));
      assert.ok(config.logicalShards > 0);
      assert.equal(jsonSchemaErrors(fields), null);
    });
  }
}

check(pageBlocks('docs/cluster.md', ['json']));
check(pageBlocks('docs/lookups.md', ['json']), USERS);
check(pageBlocks('docs/adopt.md', ['json']));
