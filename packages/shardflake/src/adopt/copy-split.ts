import { shardForKey } from '../routing/shard-key.js';

/**
 * The rows of one table's `COPY (SELECT shard, columns…) TO STDOUT` (text format), routed to the server that holds
 * each row's shard, with their old-id and lookup entries: the text format ends every row with a newline (a newline
 * inside a value is written `\n`) and separates columns with a tab, so a row is routed without parsing its values.
 * Lines keep their shard as their first column: they go into the server's staging table as they are (copy.ts).
 */
export interface SplitTarget {
  logicalShards: number;
  /** The server that holds a shard. */
  serverOf: (shard: number) => string;
  /** Index among the table's columns of its `id` (what entries point at). */
  idColumn: number;
  /** The table's name in old-id entries (tables that have them). */
  entries?: string;
  /** Lookups of the table: name and column index. */
  lookups: { name: string; column: number }[];
}

/** COPY text's escapes undone (the value a lookup hashes): `\\`, `\t`, `\n`, `\r`, `\b`, `\f`, `\v`, octal, hex. */
export function unescapeCopyText(value: string): string {
  if (!value.includes('\\')) return value;
  return value.replace(/\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)/g, (_, e: string) => {
    switch (e[0]) {
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'v':
        return '\v';
      case 'x':
        return String.fromCharCode(Number.parseInt(e.slice(1), 16));
      default:
        return /^[0-7]/.test(e) ? String.fromCharCode(Number.parseInt(e, 8)) : e;
    }
  });
}

/** What one chunk routes: staging lines per server for the rows, the old-id entries and each lookup's entries. */
export interface SplitLines {
  /** `shard \t columns…` per server. */
  rows: Map<string, string[]>;
  /** `entry shard \t tbl \t id \t shard` per server. */
  entries: Map<string, string[]>;
  /** `entry shard \t value \t id` per lookup, per server. */
  lookupEntries: Map<string, Map<string, string[]>>;
}

export class ShardSplitter {
  count = 0;
  private tail = '';

  constructor(private readonly target: SplitTarget) {}

  /** Routes the whole lines of a chunk of COPY output (a partial last line waits for the next chunk). */
  push(chunk: string): SplitLines {
    const out: SplitLines = {
      rows: new Map(),
      entries: new Map(),
      lookupEntries: new Map(this.target.lookups.map((l) => [l.name, new Map()])),
    };
    const text = this.tail + chunk;
    let start = 0;
    for (let end = text.indexOf('\n', start); end !== -1; end = text.indexOf('\n', start)) {
      this.line(text.slice(start, end), out);
      start = end + 1;
    }
    this.tail = text.slice(start);
    return out;
  }

  private line(line: string, out: SplitLines): void {
    const tab = line.indexOf('\t');
    const shard = Number(line.slice(0, tab));
    const { entries, lookups, logicalShards, serverOf } = this.target;
    add(out.rows, serverOf(shard), line);
    this.count++;
    if (entries === undefined && lookups.length === 0) return;
    const row = line.slice(tab + 1);
    const id = field(row, this.target.idColumn);
    if (entries !== undefined) {
      const n = BigInt(logicalShards);
      const entryShard = Number(((BigInt(id) % n) + n) % n);
      add(out.entries, serverOf(entryShard), `${entryShard}\t${entries}\t${id}\t${shard}`);
    }
    for (const l of lookups) {
      const value = field(row, l.column);
      if (value === '\\N') continue;
      const at = shardForKey(unescapeCopyText(value), logicalShards);
      add(out.lookupEntries.get(l.name) as Map<string, string[]>, serverOf(at), `${at}\t${value}\t${id}`);
    }
  }
}

/** The `n`th tab-separated field of a COPY text row, without splitting the whole row. */
function field(row: string, n: number): string {
  let start = 0;
  for (let i = 0; i < n; i++) start = row.indexOf('\t', start) + 1;
  const end = row.indexOf('\t', start);
  return end === -1 ? row.slice(start) : row.slice(start, end);
}

function add(map: Map<string, string[]>, key: string, line: string): void {
  const list = map.get(key);
  if (list) list.push(line);
  else map.set(key, [line]);
}
