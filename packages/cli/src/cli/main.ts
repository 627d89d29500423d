#!/usr/bin/env node
import { stopEmbeddedServersOnSignals } from '@shardflake/embedded';
import { Command, CommanderError } from 'commander';
import { redactSecrets, ShardflakeError } from 'shardflake/internal/errors/errors.js';
import { isConnectionLoss, wrapPgError } from 'shardflake/internal/postgres/connect.js';
import { VERSION } from 'shardflake/internal/telemetry/version.js';

/**
 * Each top-level command's module, loaded on demand: `shardflake id new` then loads the id code only, not the
 * cluster, move, dashboard and benchmark code (and their dependencies) that every other command pulls in. In the
 * order `--help` lists them.
 */
const COMMANDS: Record<string, () => Promise<(program: Command) => void>> = {
  id: async () => (await import('./commands/id.js')).registerIdCommands,
  sql: async () => (await import('./commands/sql.js')).registerSqlCommands,
  cluster: async () => (await import('./commands/cluster.js')).registerClusterCommands,
  bench: async () => (await import('./commands/bench.js')).registerBenchCommands,
  demo: async () => (await import('./commands/demo.js')).registerDemoCommand,
};

/**
 * The CLI is a thin layer: each command file parses its flags, calls the library and prints. Errors end here:
 * one line on stderr, a non-zero exit code, a stack only with --debug.
 */
export async function buildProgram(argv: string[]): Promise<Command> {
  const program = new Command('shardflake')
    .description('Instagram-style sharding and 64-bit time-sortable ids for PostgreSQL')
    .version(VERSION)
    .option('--debug', 'print stack traces for errors')
    // A usage mistake (unknown option, missing argument, a typo of a command with its suggestion) is one line too,
    // with the hint on it; subcommands inherit this.
    .configureOutput({
      outputError: (text, write) => write(`shardflake: ${oneLine(text)} (run with --help for usage)\n`),
    })
    .exitOverride();
  // The command is the first word after the program's own flags (none of which takes a value); without a known
  // one (`--help`, `help`, a typo) every command is registered, so commander's help and errors stay as they were.
  const named = argv.slice(2).find((arg) => !arg.startsWith('-'));
  const wanted = named !== undefined && Object.hasOwn(COMMANDS, named) ? [named] : Object.keys(COMMANDS);
  const registers = await Promise.all(wanted.map((name) => COMMANDS[name]?.()));
  for (const register of registers) register?.(program);
  return program;
}

/** A message as one line: the line breaks some carry (JSON.parse's excerpt of a file, commander's suggestion). */
function oneLine(text: string): string {
  return text.trim().replace(/\s*\r?\n\s*/g, ' ');
}

/** commander's codes for help and version output, which are not mistakes; every other CommanderError is one. */
const NOT_A_MISTAKE = ['commander.helpDisplayed', 'commander.help', 'commander.version'];

function exitCodeFor(error: unknown): number {
  if (error instanceof ShardflakeError) {
    return [
      'SERVER_UNREACHABLE',
      'AUTH_FAILED',
      'DATABASE_ERROR',
      'POOL_TIMEOUT',
      'MOVE_FAILED',
      'ADOPT_FAILED',
      'MIGRATION_FAILED',
      'NO_PRIMARY',
      'PREPARED_TRANSACTIONS_DISABLED',
      'TRANSACTION_ABORTED',
      'RESTORE_POINT_FAILED',
      'RESTORE_FAILED',
      'DEADLOCK',
      'LOCK_TIMEOUT',
      'IDLE_TIMEOUT',
    ].includes(error.code)
      ? 3
      : 2;
  }
  return 1;
}

export async function runCli(argv: string[]): Promise<number> {
  const debug = argv.includes('--debug');
  try {
    const program = await buildProgram(argv);
    await program.parseAsync(argv);
    return process.exitCode === undefined ? 0 : Number(process.exitCode);
  } catch (thrown) {
    // A lost connection that reached here unwrapped is SERVER_UNREACHABLE like any other (the one mapping).
    const error = isConnectionLoss(thrown) ? wrapPgError(thrown) : thrown;
    if (error instanceof CommanderError) {
      // commander already printed its one line (or the help/version text); a usage mistake is bad input: 2.
      return NOT_A_MISTAKE.includes(error.code) ? error.exitCode : 2;
    }
    if (error instanceof ShardflakeError) {
      process.stderr.write(`shardflake: error [${error.code}]: ${oneLine(redactSecrets(error.message))}\n`);
    } else {
      const message = error instanceof Error ? error.message : String(error);
      process.stderr.write(`shardflake: internal error: ${oneLine(redactSecrets(message))}\n`);
    }
    if (debug && error instanceof Error && error.stack)
      process.stderr.write(`${redactSecrets(error.stack)}\n`);
    return exitCodeFor(error);
  }
}

/**
 * Resolves once everything written to `stream` so far has reached the operating system (or the reader is gone).
 * Writes to a pipe are asynchronous in Node: what a slow reader has not taken yet waits in the process, and
 * process.exit() drops it (issue 32: `cluster status --json | …` stopped at byte 65,536 with exit code 0). An
 * empty write's callback runs after every write queued before it.
 */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || stream.writableEnded) return resolve();
    // A reader that went away (EPIPE, `| head`) wants nothing more: the callback gets the error, and so does this.
    stream.on('error', () => resolve());
    stream.write('', () => resolve());
  });
}

// The library installs no signal handlers; the CLI, which owns its process, stops the embedded servers a command
// started when it is interrupted (commands that handle signals themselves set this aside while they run).
stopEmbeddedServersOnSignals();
const code = await runCli(process.argv);
process.exitCode = code;
// Every byte of the command's output is handed over first, then the process ends at once, with the command's
// code, even if something still holds the event loop open (commands stop their own servers and pools before
// returning; this only keeps a forgotten timer from holding the shell).
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
process.exit(code);
