import { createRequire } from 'node:module';
import type * as CopyStreams from 'pg-copy-streams';

/**
 * pg-copy-streams' `COPY … FROM STDIN` / `TO STDOUT` streams, loaded on first use: it loads pg, which a process
 * that imports shardflake without copying anything (most of them) should not pay for (see connect.ts).
 */
let loaded: typeof CopyStreams | undefined;
const load = () => {
  loaded ??= createRequire(import.meta.url)('pg-copy-streams') as typeof CopyStreams;
  return loaded;
};

export const copyFrom: typeof CopyStreams.from = (text, options) => load().from(text, options);
export const copyTo: typeof CopyStreams.to = (text, options) => load().to(text, options);
