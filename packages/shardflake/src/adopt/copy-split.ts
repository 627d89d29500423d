import { shardForKey } from '../routing/shard-key.js';

/**
 * The rows of one table's `COPY (SELECT shard, columns…) TO STDOUT` (text format), split into one buffer of COPY
 * lines per shard, with their old-id and lookup entries: the text format ends every row with a newline (a newline
 * inside a value is written `\n`) and separates columns with a tab, so a row is split without parsing its values.
 */
export interface SplitTarget {
  logicalShards: number;
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

/** What one flush writes: COPY lines per shard for the table, its old-id entries and its lookups' entries. */
export interface SplitBuffers {
  rows: Map<number, string[]>;
  /** `tbl \t id \t shard` lines per entry shard. */
  entries: Map<number, string[]>;
  /** `value \t id` lines per lookup, per entry shard. */
  lookupEntries: Map<string, Map<number, string[]>>;
}

export class ShardSplitter implements SplitBuffers {
  rows = new Map<number, string[]>();
  entries = new Map<number, string[]>();
  lookupEntries = new Map<string, Map<number, string[]>>();
  bytes = 0;
  count = 0;
  private tail = '';

  constructor(private readonly target: SplitTarget) {
    for (const l of target.lookups) this.lookupEntries.set(l.name, new Map());
  }

  /** Hands over the lines split so far and starts new buffers (the next chunks split while these are written). */
  take(): SplitBuffers {
    const taken = { rows: this.rows, entries: this.entries, lookupEntries: this.lookupEntries };
    this.rows = new Map();
    this.entries = new Map();
    this.lookupEntries = new Map([...taken.lookupEntries.keys()].map((k) => [k, new Map()]));
    this.bytes = 0;
    return taken;
  }

  /** Takes a chunk of COPY output; whole lines are split now, a partial last line waits for the next chunk. */
  push(chunk: string): void {
    const text = this.tail + chunk;
    let start = 0;
    for (let end = text.indexOf('\n', start); end !== -1; end = text.indexOf('\n', start)) {
      this.line(text.slice(start, end));
      start = end + 1;
    }
    this.tail = text.slice(start);
  }

  private line(line: string): void {
    const tab = line.indexOf('\t');
    const shard = Number(line.slice(0, tab));
    const row = line.slice(tab + 1);
    add(this.rows, shard, row);
    this.bytes += row.length + 1;
    this.count++;
    const { entries, lookups, logicalShards } = this.target;
    if (!entries && lookups.length === 0) return;
    const id = field(row, this.target.idColumn);
    if (entries !== undefined) {
      const entryShard = Number(
        ((BigInt(id) % BigInt(logicalShards)) + BigInt(logicalShards)) % BigInt(logicalShards),
      );
      add(this.entries, entryShard, `${entries}\t${id}\t${shard}`);
    }
    for (const l of lookups) {
      const value = field(row, l.column);
      if (value === '\\N') continue;
      const at = shardForKey(unescapeCopyText(value), logicalShards);
      add(this.lookupEntries.get(l.name) as Map<number, string[]>, at, `${value}\t${id}`);
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

function add(map: Map<number, string[]>, key: number, line: string): void {
  const list = map.get(key);
  if (list) list.push(line);
  else map.set(key, [line]);
}
