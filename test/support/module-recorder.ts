import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

/**
 * A temp folder holding a module resolve hook that appends every resolved URL to the file named by its `log` data
 * (register it with `register(hooks, { data: { log } })` in a child process). Tests use it to see which modules a
 * command or an entry point loads. The folder is removed after the file's tests.
 */
export async function moduleRecorder(prefix: string): Promise<{ temp: string; hooks: string }> {
  const temp = await mkdtemp(join(tmpdir(), prefix));
  after(() => rm(temp, { recursive: true, force: true }));
  const hooks = join(temp, 'record-hooks.mjs');
  await writeFile(
    hooks,
    `import { appendFileSync } from 'node:fs';
let log;
export function initialize(data) { log = data.log; }
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  appendFileSync(log, result.url + '\\n');
  return result;
}
`,
  );
  return { temp, hooks };
}
