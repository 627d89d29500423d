import cliProgress from 'cli-progress';

/** How every command prints what it is not printing as plain text: JSON for machines, a progress bar for people. */

/** JSON with bigints as strings (ids beyond 2^53 must not lose digits in a JavaScript reader). */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (typeof v === 'bigint' ? v.toString() : v), 2);
}

/** A progress bar on stderr when it is a terminal and output is not JSON; otherwise a no-op. */
export function progressBar(
  label: string,
  enabled: boolean,
): { update(done: number, total: number): void; stop(): void } {
  if (!enabled || !process.stderr.isTTY) return { update() {}, stop() {} };
  const bar = new cliProgress.SingleBar(
    {
      format: `${label} [{bar}] {value}/{total} {percentage}% {eta_formatted}`,
      stream: process.stderr,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  let shown = 0;
  return {
    update(done, total) {
      if (!started) {
        bar.start(total, done);
        started = true;
        shown = total;
        return;
      }
      // A total that changes (rows while copying, then shards while switching) restarts the count and its ETA.
      if (total !== shown) {
        bar.setTotal(total);
        shown = total;
      }
      bar.update(done);
    },
    stop() {
      if (started) bar.stop();
    },
  };
}

/**
 * One progress bar per named phase of a long run (init, then inserts, then feed …): a new bar starts whenever the
 * phase's name changes. Pass `update` as the library's `onProgress`, and call `stop` when the run ends.
 */
export function phasedProgress(
  width: number,
  enabled: boolean,
): { update(phase: string, done: number, total: number): void; stop(): void } {
  let phase = '';
  let bar = progressBar('', false);
  return {
    update(name, done, total) {
      if (name !== phase) {
        bar.stop();
        phase = name;
        bar = progressBar(name.padEnd(width), enabled);
      }
      bar.update(done, total);
    },
    stop: () => bar.stop(),
  };
}
