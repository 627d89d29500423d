/**
 * The tag of a session in a transaction across shards: its `application_name`, set with `set_config(…, true)`
 * (`SET LOCAL`) in the round trip of the session's BEGIN. It reverts by itself at COMMIT, ROLLBACK or PREPARE, so
 * a pooled connection never carries a stale tag into its next transaction, and a prepared transaction, which has
 * no session, carries none.
 *
 * `shardflake tx <txid> <born>`: the transaction's id (recovery/gid.ts, the same in its gids), and when its first
 * attempt began (ms since 1970, base 36). Sessions of one transaction on different servers carry the same tag:
 * that is what joins each server's waits into one graph. `born` orders transactions by age for the choice of a
 * victim; it stays the same when withShards runs the callback again, so a transaction re-run after it was chosen
 * grows older than the newcomers and is not chosen for ever. 14 + 20 + 1 + 8 characters: far below the 63 that
 * application_name keeps.
 */
export interface TransactionTag {
  readonly txid: string;
  /** When the transaction's first attempt began, in ms since 1970. */
  readonly born: number;
}

const PREFIX = 'shardflake tx ';
const WORD = /^[0-9a-z]{1,24}$/;

export function formatTag(tag: TransactionTag): string {
  return `${PREFIX}${tag.txid} ${tag.born.toString(36)}`;
}

/** The tag in an application_name, or undefined for any other session. */
export function parseTag(name: string | null | undefined): TransactionTag | undefined {
  if (!name?.startsWith(PREFIX)) return undefined;
  const [txid, born, extra] = name.slice(PREFIX.length).split(' ');
  if (!txid || !born || extra !== undefined || !WORD.test(txid) || !WORD.test(born)) return undefined;
  const ms = Number.parseInt(born, 36);
  return Number.isSafeInteger(ms) ? { txid, born: ms } : undefined;
}

/** True when `a` is younger than `b`: born later, or (born in the same millisecond) the greater txid. */
export function younger(a: TransactionTag, b: TransactionTag): boolean {
  return a.born !== b.born ? a.born > b.born : a.txid > b.txid;
}
