import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { CLI_MAIN } from '../support/cli.js';

/**
 * The fenced code blocks of the README and of docs/*.md, and the runners the page tests share.
 *
 * A block's kind is its info string (`js`, `ts`, `console recorded`, … ; '' for a block without one). A page test
 * takes the blocks of the kinds it runs with `pageBlocks(page, kinds)`, written with literal arguments:
 * test/docs/every-block-has-a-runner.test.ts reads those calls from the test sources and fails when a page has a
 * block of a kind that no test claims. Paths are relative to the repository root, where the tests run.
 */
export interface Block {
  page: string;
  /** Position among the page's blocks, from 0. */
  index: number;
  /** Line of the opening fence, from 1. */
  line: number;
  kind: string;
  code: string;
}

/** Every fenced block of a page (``` fences at the start of a line; the README and docs use no other). */
export function readBlocks(page: string): Block[] {
  const lines = readFileSync(page, 'utf8').split('\n');
  const blocks: Block[] = [];
  let open: { line: number; kind: string; body: string[] } | undefined;
  lines.forEach((text, i) => {
    if (!text.startsWith('```')) {
      open?.body.push(text);
      return;
    }
    if (open) {
      blocks.push({
        page,
        index: blocks.length,
        line: open.line,
        kind: open.kind,
        code: open.body.length ? `${open.body.join('\n')}\n` : '',
      });
      open = undefined;
    } else open = { line: i + 1, kind: text.slice(3).trim(), body: [] };
  });
  assert.equal(open, undefined, `${page}: a fence opened on line ${open?.line} is never closed`);
  return blocks;
}

/** The blocks of `page` whose kind is one of `kinds`: the ones the calling test runs or checks. */
export function pageBlocks(page: string, kinds: readonly string[]): Block[] {
  const blocks = readBlocks(page).filter((b) => kinds.includes(b.kind));
  assert.ok(blocks.length > 0, `${page} has no block of the kinds ${kinds.join(', ')}`);
  return blocks;
}

/** The block right after `block` on its page when it is output (`text` or no info string), else undefined. */
export function outputAfter(block: Block): Block | undefined {
  const next = readBlocks(block.page)[block.index + 1];
  return next && (next.kind === 'text' || next.kind === '') ? next : undefined;
}

export function where(block: Block): string {
  return `${block.page}:${block.line} (${block.kind || 'no info string'})`;
}

/**
 * Runs a `js` block as a module from the repository root, so `import … from 'shardflake'` resolves as it does in an
 * application (the workspace packages are linked into node_modules), and returns its stdout; a non-zero exit fails.
 */
export function runModule(block: Block, timeoutMs = 180_000): string {
  const file = `.docs-block-${process.pid}-${block.page.replace(/\W/g, '_')}-${block.index}.mjs`;
  writeFileSync(file, block.code);
  try {
    const result = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: timeoutMs });
    assert.equal(result.status, 0, `${where(block)} exited with ${result.status}:\n${result.stderr}`);
    return result.stdout;
  } finally {
    rmSync(file, { force: true });
  }
}

/**
 * Output compared line by line with what the page shows. Lines for which `varies(shownLine)` holds (an id made
 * now, a port) must be there and have the same length; every other line must be equal.
 */
export function assertSameOutput(
  actual: string,
  shown: string,
  what: string,
  varies: (line: string) => boolean = () => false,
): void {
  const a = actual.split('\n');
  const s = shown.split('\n');
  assert.equal(a.length, s.length, `${what}: ${a.length} lines printed, ${s.length} shown:\n${actual}`);
  s.forEach((line, i) => {
    const got = a[i] as string;
    if (varies(line)) assert.equal(got.length, line.length, `${what}, line ${i + 1}: ${got} vs ${line}`);
    else assert.equal(got, line, `${what}, line ${i + 1}:\n${actual}`);
  });
}

/** Splits a shell line into words, honouring single and double quotes (no expansions: the docs use none). */
function words(line: string): string[] {
  const out: string[] = [];
  let word = '';
  let quote: string | undefined;
  let started = false;
  for (const ch of line) {
    if (quote) {
      if (ch === quote) quote = undefined;
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      started = true;
    } else if (/\s/.test(ch)) {
      if (started || word) out.push(word);
      word = '';
      started = false;
    } else word += ch;
  }
  if (started || word) out.push(word);
  return out;
}

/** A shell line without its trailing `# comment` (a `#` after whitespace and outside quotes). */
function withoutComment(line: string): string {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i] as string;
    if (quote) {
      if (ch === quote) quote = undefined;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (ch === '#' && (i === 0 || /\s/.test(line[i - 1] as string))) return line.slice(0, i);
  }
  return line;
}

/** The commands of a shell text: continuations joined, comments dropped, `;`/`&&` split (outside quotes). */
export function commandsOf(text: string): string[] {
  const joined = text.replace(/\\\n\s*/g, ' ');
  const out: string[] = [];
  for (const raw of joined.split('\n')) {
    let rest = withoutComment(raw).trim();
    while (rest) {
      const m = /^((?:[^'";&]|'[^']*'|"[^"]*")*)(;|&&)?\s*/.exec(rest) as RegExpExecArray;
      if ((m[1] as string).trim()) out.push((m[1] as string).trim());
      rest = rest.slice(m[0].length);
      if (!m[2] && rest) throw new Error(`cannot split ${raw}`);
    }
  }
  return out;
}

const helpCache = new Map<string, string>();

function cliHelp(path: string[]): string {
  const key = path.join(' ');
  let help = helpCache.get(key);
  if (help === undefined) {
    const r = spawnSync(process.execPath, [CLI_MAIN, ...path, '--help'], { encoding: 'utf8' });
    assert.equal(r.status, 0, `shardflake ${key} --help: ${r.stderr}`);
    help = r.stdout;
    helpCache.set(key, help);
  }
  return help;
}

/** The subcommands a `--help` page lists under "Commands:". */
function subcommands(help: string): string[] {
  const section = help.split(/^Commands:$/m)[1] ?? '';
  return [...section.matchAll(/^ {2}([a-z][\w-]*)/gm)].map((m) => m[1] as string);
}

/** A `shardflake …` command line: the subcommands exist and every `--flag` is one its `--help` lists. */
function checkCli(args: string[], line: string): void {
  const path: string[] = [];
  let i = 0;
  for (; i < args.length; i++) {
    const word = args[i] as string;
    if (word.startsWith('-')) break;
    const commands = subcommands(cliHelp(path));
    if (commands.length === 0) break;
    assert.ok(commands.includes(word), `${line}: "shardflake ${path.join(' ')}" has no command ${word}`);
    path.push(word);
  }
  const help = cliHelp(path);
  const asksForHelp = args.some((a) => ['--help', '-h', '--version', '-V'].includes(a));
  assert.ok(
    asksForHelp || subcommands(help).length === 0,
    `${line}: "shardflake ${path.join(' ')}" needs a subcommand`,
  );
  for (const word of args.slice(i)) {
    const flag = /^--[\w-]+/.exec(word)?.[0];
    if (flag) {
      assert.ok(new RegExp(`${flag}\\b`).test(help), `${line}: shardflake ${path.join(' ')} has no ${flag}`);
    }
  }
}

const rootPackage = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };

/** Package names an `npm install` in the docs may name: the workspace packages and what they depend on. */
function knownPackages(): Set<string> {
  const names = new Set<string>();
  for (const dir of ['.', 'packages/shardflake', 'packages/cli', 'packages/embedded']) {
    const pkg = JSON.parse(readFileSync(`${dir}/package.json`, 'utf8'));
    names.add(pkg.name);
    for (const field of ['dependencies', 'devDependencies', 'peerDependencies'])
      for (const name of Object.keys(pkg[field] ?? {})) names.add(name);
  }
  return names;
}

/**
 * Checks one command the docs show without running it: `shardflake` (also as `npx shardflake` or the built
 * main.js) against the CLI's `--help`, `npm` against package.json's scripts and packages, a script against the
 * repository. Anything else is refused, so a new kind of command needs a check here.
 */
export function checkCommand(command: string): void {
  const args = words(command);
  while (/^[A-Z_]+=/.test(args[0] ?? '')) args.shift(); // VAR=value prefixes
  const [first = '', second = '', third = ''] = args;
  if (first === 'npx' && second === 'shardflake') checkCli(args.slice(2), command);
  else if (first === 'shardflake') checkCli(args.slice(1), command);
  else if (first === 'node' && second === 'packages/cli/dist/cli/main.js') checkCli(args.slice(2), command);
  else if (first === 'node' && second.startsWith('scripts/'))
    assert.ok(existsSync(second), `${command}: no file`);
  else if (first.startsWith('scripts/')) assert.ok(existsSync(first), `${command}: no file`);
  else if (first === 'npm' && (second === 'start' || second === 'test'))
    assert.ok(rootPackage.scripts[second], `${command}: no npm script ${second}`);
  else if (first === 'npm' && second === 'run')
    assert.ok(rootPackage.scripts[third], `${command}: no npm script`);
  else if (first === 'npm' && (second === 'install' || second === 'ci')) {
    const known = knownPackages();
    for (const name of args.slice(2).filter((a) => !a.startsWith('-')))
      assert.ok(
        known.has(name),
        `${command}: ${name} is not a package of this repository or its dependencies`,
      );
  } else if (first !== 'echo')
    assert.fail(`no check for the command "${command}": add one to test/docs/blocks.ts`);
}

/** The `$ command` lines of a terminal session block, without the prompt. */
export function sessionCommands(block: Block): string[] {
  return block.code
    .split('\n')
    .filter((l) => l.startsWith('$ '))
    .map((l) => l.slice(2));
}

/** Checks every command of an `sh` block, or of a `console recorded` session. */
export function checkCommands(block: Block): void {
  const text = block.kind === 'sh' ? block.code : sessionCommands(block).join('\n');
  const commands = commandsOf(text);
  assert.ok(commands.length > 0, `${where(block)} has no command`);
  for (const command of commands) checkCommand(command);
}

/**
 * Runs a `console` session: each `$ command` in bash from `cwd` (`npx shardflake` and `shardflake` are the built
 * CLI), stdout and stderr together, and compares what it printed with the lines the page shows after it.
 */
export function runSession(
  block: Block,
  options: { cwd?: string; varies?: (command: string, line: string) => boolean } = {},
): void {
  const steps: { command: string; shown: string[] }[] = [];
  for (const line of block.code.replace(/\n$/, '').split('\n')) {
    if (line.startsWith('$ ')) steps.push({ command: line.slice(2), shown: [] });
    else {
      assert.ok(steps.length > 0, `${where(block)} starts with output, not a $ command`);
      steps.at(-1)?.shown.push(line);
    }
  }
  const cli = `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI_MAIN)}`;
  for (const { command, shown } of steps) {
    const script = withoutComment(command).replace(/(^|;\s*|&&\s*)(npx )?shardflake /g, `$1${cli} `);
    const r = spawnSync('bash', ['-c', `{ ${script}; } 2>&1`], {
      cwd: options.cwd,
      encoding: 'utf8',
      timeout: 60_000,
    });
    const expected = shown.length ? `${shown.join('\n')}\n` : '';
    assertSameOutput(r.stdout, expected, `${where(block)}: $ ${command}`, (line) =>
      options.varies ? options.varies(command, line) : false,
    );
  }
}
