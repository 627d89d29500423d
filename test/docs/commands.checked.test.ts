import { test } from 'node:test';
import { checkCommands, pageBlocks, where } from './blocks.js';

// The commands the docs show but do not run here (they need a clone's own servers, hours, or three servers and
// 50,000 rows: a benchmark, a move) are checked instead: every `shardflake` subcommand and flag exists in the CLI's
// own --help, every npm script in package.json, every script file in the repository.
const blocks = [
  ...pageBlocks('README.md', ['sh']),
  ...pageBlocks('docs/next-id.md', ['sh']),
  ...pageBlocks('docs/cluster.md', ['console recorded']),
  ...pageBlocks('docs/operations.md', ['console recorded']),
  ...pageBlocks('docs/applications.md', ['console recorded']),
  ...pageBlocks('docs/moves.md', ['sh', 'console recorded']),
  ...pageBlocks('docs/adopt.md', ['sh', 'console recorded']),
  ...pageBlocks('docs/benchmarks.md', ['sh', 'console recorded']),
  ...pageBlocks('docs/backups.md', ['sh', 'console recorded']),
];

for (const block of blocks) {
  test(`${where(block)}: every command exists with the flags shown`, () => checkCommands(block));
}
