import { createRequire } from 'node:module';
import type pg from 'pg';
import { bigintTypes } from './connect.js';

/**
 * Several statements in one round trip: each is parsed, bound and executed with the extended protocol (so each
 * keeps its own parameters, unprepared), and one Sync follows the last. PostgreSQL runs them in order; when one
 * fails it skips the rest up to the Sync, so a statement never runs after a failed one. Inside an open
 * transaction (BEGIN first, or a BEGIN earlier on the connection) the failure aborts the transaction: a COMMIT
 * at the end of the same batch is then not executed, and the caller must ROLLBACK.
 *
 * pg sends one Sync per query and waits for each answer; this is the same wire traffic as its Query, with the
 * Syncs in between left out. Rows come back parsed as the library's connections parse them (int8 → bigint).
 */
export interface BatchStatement {
  text: string;
  values?: readonly unknown[];
  /** Maps this statement's failure to the error its caller gets (not used by queryBatch itself). */
  onError?: (error: unknown) => unknown;
  /**
   * Only success or failure is read (BEGIN, SET, COMMIT, a set_config): the statement is not described and its
   * rows are dropped, so its result has its command and row count but no fields or rows — two messages fewer on
   * the wire and no row description to parse.
   */
  quiet?: boolean;
}

/** A batch that failed: the statement that failed (or was in flight when the connection went), and why. */
export class BatchFailure extends Error {
  constructor(
    readonly index: number,
    override readonly cause: unknown,
  ) {
    super((cause as { message?: string } | undefined)?.message ?? String(cause));
    this.name = 'BatchFailure';
  }
}

type ResultClass = new (
  rowMode: undefined,
  types: typeof bigintTypes,
) => pg.QueryResult & {
  addFields(fields: unknown[]): void;
  parseRow(fields: unknown[]): unknown;
  addRow(row: unknown): void;
  addCommandComplete(message: unknown): void;
};
interface PgInternals {
  Result: ResultClass;
  prepareValue: (value: unknown) => unknown;
}
let internals: PgInternals | undefined;
function pgInternals(): PgInternals {
  if (!internals) {
    const require = createRequire(import.meta.url);
    internals = {
      Result: require('pg/lib/result.js') as ResultClass,
      prepareValue: (require('pg/lib/utils.js') as PgInternals).prepareValue,
    };
  }
  return internals;
}

/** What pg's client expects of a submitted query (its protocol handlers); see pg/lib/query.js. */
interface Connection {
  stream: { cork?: () => void; uncork?: () => void };
  parse(message: { text: string; types: never[] }): void;
  bind(message: { values: unknown[] }): void;
  describe(message: { type: 'P'; name: string }): void;
  execute(message: { portal: string; rows: number }): void;
  sync(): void;
  sendCopyFail(message: string): void;
}

/** Sends `statements` on `client` in one round trip; resolves with every statement's result, in order. */
export function queryBatch(
  client: pg.ClientBase,
  statements: readonly BatchStatement[],
): Promise<pg.QueryResult[]> {
  const { prepareValue } = pgInternals();
  let bound: unknown[][];
  try {
    bound = statements.map((s) => (s.values ?? []).map((v) => prepareValue(v)));
  } catch (error) {
    return Promise.reject(new BatchFailure(0, error));
  }
  return new Promise((resolve, reject) => {
    (client.query as (query: unknown) => unknown)(new BatchQuery(statements, bound, resolve, reject));
  });
}

/**
 * The batch as pg's client submits it and hands it the server's answers (pg/lib/query.js has the same methods).
 * A class rather than an object of closures: one is made per round trip.
 */
class BatchQuery {
  readonly results: ReturnType<typeof newResult>[];
  at = 0;
  failed = false;

  constructor(
    readonly statements: readonly BatchStatement[],
    readonly bound: unknown[][],
    readonly resolve: (results: pg.QueryResult[]) => void,
    readonly reject: (failure: BatchFailure) => void,
  ) {
    this.results = statements.map(newResult);
  }

  submit(connection: Connection) {
    connection.stream.cork?.();
    try {
      for (let i = 0; i < this.statements.length; i++) {
        connection.parse({ text: (this.statements[i] as BatchStatement).text, types: [] });
        connection.bind({ values: this.bound[i] as unknown[] });
        if (!this.statements[i]?.quiet) connection.describe({ type: 'P', name: '' });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(message: { fields: unknown[] }) {
    this.results[this.at]?.addFields(message.fields);
  }

  handleDataRow(message: { fields: unknown[] }) {
    // A quiet statement was not described: there is nothing to parse its rows with, and nobody reads them.
    if (this.statements[this.at]?.quiet) return;
    const result = this.results[this.at];
    result?.addRow(result.parseRow(message.fields));
  }

  handleCommandComplete(message: unknown) {
    this.results[this.at]?.addCommandComplete(message);
    this.at++;
  }

  handleEmptyQuery() {
    this.at++;
  }

  handlePortalSuspended() {}

  handleCopyInResponse(connection: Connection) {
    connection.sendCopyFail('COPY is not supported in a batch');
  }

  handleCopyData() {}

  // An error message ends the query for pg (the ReadyForQuery after it is not passed on), as does a lost
  // connection.
  handleError(error: unknown) {
    if (this.failed) return;
    this.failed = true;
    this.reject(new BatchFailure(Math.min(this.at, this.statements.length - 1), error));
  }

  handleReadyForQuery() {
    if (!this.failed) this.resolve(this.results);
  }
}

function newResult() {
  return new (pgInternals().Result)(undefined, bigintTypes);
}
