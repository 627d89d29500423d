import { chmod, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { EmbeddedServer } from '@shardflake/embedded';
import type { Command } from 'commander';
import { positiveInteger } from './options.js';
import { progressBar } from './output.js';

/** `shardflake demo` (= `npm start`): the whole design on two local PostgreSQL servers, in under a minute. */
export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description(
      'start two local PostgreSQL servers, build a sharded cluster, write and read through the router',
    )
    .option('--keep', 'leave the servers running (until Ctrl-C) and print how to connect with psql')
    .option('--dir <folder>', 'data folder for the servers', '.shardflake/demo')
    .option('--shards <n>', 'logical shards', positiveInteger('--shards'), 256)
    .action(async (flags: { keep?: boolean; dir: string; shards: number }) => {
      let phase = '';
      let bar = progressBar('', false);
      const log = (line: string) => {
        bar.stop();
        phase = '';
        process.stdout.write(`${line}\n`);
      };

      // The servers once they are up; [] when the run ends (or never begins) without starting them.
      let servers: EmbeddedServer[] = [];
      let started!: (list: EmbeddedServer[]) => void;
      const serversKnown = new Promise<EmbeddedServer[]>((resolveServers) => {
        started = resolveServers;
      });
      let stopping: Promise<unknown> | undefined;
      const stop = async () => {
        stopping ??= serversKnown.then((list) => Promise.all(list.map((s) => s.stop().catch(() => {}))));
        await stopping;
      };
      // A signal stops the servers and ends the process with the shell's code for it. Servers still starting (a
      // first run's initdb) are waited for, so that none is left running and initdb's password file is removed;
      // further signals meanwhile change nothing (a SIGKILL would leave the servers running, and the next demo
      // stops them).
      let interrupted: Promise<never> | undefined;
      const onSignal = (signal: NodeJS.Signals) => {
        if (interrupted) return;
        bar.stop();
        process.stderr.write('\nstopping the demo servers…\n');
        interrupted = stop().then(() => process.exit(EXIT_ON_SIGNAL[signal as StopSignal]));
      };
      for (const signal of STOP_SIGNALS) process.on(signal, onSignal);

      let restoreExitHook = () => {};
      try {
        const { runDemo } = await import('../../demo/demo.js');
        // The CLI's general handler (stopEmbeddedServersOnSignals) stops the servers and exits at once on
        // SIGINT/SIGTERM, even while a server is still being initialised (leaving initdb's password file in the
        // temp folder): this command's own handler does it instead, in order.
        restoreExitHook = setAsideOtherListeners(onSignal);
        if (interrupted) return;
        await runDemo({
          dir: flags.dir,
          logicalShards: flags.shards,
          log,
          onServers: (list) => {
            servers = list;
            started(list);
          },
          progress: (name, done, total) => {
            if (interrupted) return;
            if (name !== phase) {
              bar.stop();
              phase = name;
              bar = progressBar(name.padEnd(7), true);
            }
            bar.update(done, total);
          },
        });
        bar.stop();
        if (flags.keep) {
          // The password goes into a pgpass file (owner-only), never onto the screen.
          const passFile = resolve(flags.dir, 'pgpass');
          await writeFile(
            passFile,
            servers.map((s) => `127.0.0.1:${s.port}:*:postgres:${new URL(s.url).password}\n`).join(''),
            { mode: 0o600 },
          );
          await chmod(passFile, 0o600);
          process.stdout.write('\nthe servers keep running until you press Ctrl-C. Connect with psql:\n');
          for (const s of servers) {
            process.stdout.write(
              `  PGPASSFILE=${passFile} psql -h 127.0.0.1 -p ${s.port} -U postgres postgres   # server ${s.name}\n`,
            );
          }
          process.stdout.write(
            '  try: SELECT * FROM shardflake.shards LIMIT 5;  SELECT id, shard_0001.id_to_timestamp(id) FROM shard_0001.photos LIMIT 5;\n',
          );
          await new Promise(() => {});
        }
      } catch (error) {
        // After a signal, the run fails because its servers are going away: that is the stop, not an error.
        if (!interrupted) throw error;
      } finally {
        bar.stop();
        started([]);
        // After a signal, the handler ends the process once the servers are down; this never returns.
        if (interrupted) await interrupted;
        await stop();
        for (const signal of STOP_SIGNALS) process.removeListener(signal, onSignal);
        restoreExitHook();
      }
    });
}

/** The signals that stop the demo, and the exit code a shell reports for each (128 + the signal's number). */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM'] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];
const EXIT_ON_SIGNAL: Record<StopSignal, number> = { SIGINT: 130, SIGTERM: 143 };

/** Removes every STOP_SIGNALS listener but `own`; returns a function that puts them back. */
function setAsideOtherListeners(own: (signal: NodeJS.Signals) => void): () => void {
  const others = STOP_SIGNALS.flatMap((signal) =>
    process
      .listeners(signal)
      .filter((listener) => listener !== own)
      .map((listener) => ({ signal, listener })),
  );
  for (const { signal, listener } of others) process.removeListener(signal, listener);
  return () => {
    for (const { signal, listener } of others) process.on(signal, listener);
  };
}
