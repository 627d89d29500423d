import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { CLI_MAIN } from '../support/cli.js';
import { moduleRecorder } from '../support/module-recorder.js';

/**
 * `shardflake id new` is the CLI's quickest command; it used to load every command's module (cluster, move,
 * dashboard, benchmarks, cli-progress) before parsing its arguments, which cost a third of its wall time. A module
 * resolve hook in the CLI process records what it loads; `cluster --help`, which needs the cluster code, shows that
 * the recorder sees it.
 */
const { temp, hooks } = await moduleRecorder('shardflake-cli-loads-');

async function modulesLoadedBy(...args: string[]): Promise<string[]> {
  const log = join(temp, `${args.join('-')}.log`);
  await writeFile(log, '');
  const register = join(temp, `register-${args.join('-')}.mjs`);
  await writeFile(
    register,
    `import { register } from 'node:module';
register(${JSON.stringify(pathToFileURL(hooks).href)}, { data: { log: ${JSON.stringify(log)} } });
`,
  );
  const child = spawnSync(process.execPath, ['--import', pathToFileURL(register).href, CLI_MAIN, ...args], {
    encoding: 'utf8',
  });
  assert.equal(child.status, 0, child.stderr);
  return (await readFile(log, 'utf8')).split('\n').filter(Boolean);
}

const OTHER_COMMANDS = [
  /\/packages\/shardflake\/dist\/(admin|catalog|config|fence|leases|lookups|move|recovery|reference|router|routing|sql|topology|transactions)\//,
  /\/packages\/cli\/dist\/(dashboard|bench)\//,
  /\/packages\/cli\/dist\/cli\/commands\/(cluster|bench|demo|sql)/,
  /\/node_modules\/(cli-progress|pg|vega|vega-lite|playwright-core)\//,
];

test('`shardflake id new` loads the id command only, not the cluster, move, dashboard or benchmark code', async () => {
  const loaded = await modulesLoadedBy('id', 'new');
  assert.ok(
    loaded.some((url) => url.endsWith('/packages/cli/dist/cli/commands/id.js')),
    'the recorder saw the id command load',
  );
  assert.deepEqual(
    loaded.filter((url) => OTHER_COMMANDS.some((p) => p.test(url))),
    [],
  );
  const cluster = await modulesLoadedBy('cluster', '--help');
  assert.ok(cluster.some((url) => url.includes('/packages/shardflake/dist/admin/')));
});
