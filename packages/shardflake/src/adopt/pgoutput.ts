/**
 * A decoder of pgoutput, protocol version 1 (PostgreSQL docs, "Logical Replication Message Formats"), for the
 * messages a publication without `messages` or `streaming` sends: Begin, Commit, Relation, Type, Origin, Insert,
 * Update, Delete, Truncate. Values come as text (the publication is read without `binary`).
 *
 *   Begin     'B' | int64 final LSN | int64 commit time (µs since 2000-01-01) | int32 xid
 *   Commit    'C' | int8 flags | int64 commit LSN | int64 end LSN | int64 commit time
 *   Relation  'R' | int32 oid | string namespace | string name | int8 replica identity | int16 columns |
 *                   per column: int8 flags (1 = part of the key) | string name | int32 type oid | int32 typmod
 *   Insert    'I' | int32 oid | 'N' | tuple
 *   Update    'U' | int32 oid | ['K' | tuple (old key) or 'O' | tuple (old row)] | 'N' | tuple
 *   Delete    'D' | int32 oid | 'K' or 'O' | tuple
 *   Truncate  'T' | int32 relations | int8 options (1 cascade, 2 restart identity) | int32 oid per relation
 *   tuple     int16 columns | per column: 'n' null | 'u' unchanged TOASTed value (not sent) | 't' int32 length, text
 */
export interface Relation {
  oid: number;
  schema: string;
  name: string;
  columns: { name: string; key: boolean; typeOid: number }[];
}

/** One column of a tuple: its text, null, or `undefined` for an unchanged TOASTed value pgoutput did not send. */
export type TupleValue = string | null | undefined;

export type PgoutputMessage =
  | { tag: 'begin'; finalLsn: bigint; xid: number; commitTime: Date }
  | { tag: 'commit'; commitLsn: bigint; endLsn: bigint; commitTime: Date }
  | { tag: 'relation'; relation: Relation }
  | { tag: 'insert'; oid: number; row: TupleValue[] }
  | { tag: 'update'; oid: number; oldKey: TupleValue[] | null; row: TupleValue[] }
  | { tag: 'delete'; oid: number; oldKey: TupleValue[] }
  | { tag: 'truncate'; oids: number[] }
  | { tag: 'other' };

/** Microseconds between 1970-01-01 and 2000-01-01, PostgreSQL's own epoch. */
const PG_EPOCH_US = 946_684_800_000_000n;

class Reader {
  private at = 0;
  constructor(private readonly b: Buffer) {}
  byte(): number {
    return this.b.readUInt8(this.at++);
  }
  int16(): number {
    const v = this.b.readInt16BE(this.at);
    this.at += 2;
    return v;
  }
  int32(): number {
    const v = this.b.readInt32BE(this.at);
    this.at += 4;
    return v;
  }
  uint32(): number {
    const v = this.b.readUInt32BE(this.at);
    this.at += 4;
    return v;
  }
  int64(): bigint {
    const v = this.b.readBigInt64BE(this.at);
    this.at += 8;
    return v;
  }
  time(): Date {
    return new Date(Number((this.int64() + PG_EPOCH_US) / 1000n));
  }
  string(): string {
    const end = this.b.indexOf(0, this.at);
    const s = this.b.toString('utf8', this.at, end);
    this.at = end + 1;
    return s;
  }
  text(length: number): string {
    const s = this.b.toString('utf8', this.at, this.at + length);
    this.at += length;
    return s;
  }
  tuple(): TupleValue[] {
    const n = this.int16();
    const values: TupleValue[] = [];
    for (let i = 0; i < n; i++) {
      const kind = String.fromCharCode(this.byte());
      if (kind === 'n') values.push(null);
      else if (kind === 'u') values.push(undefined);
      else if (kind === 't') values.push(this.text(this.int32()));
      else throw new Error(`pgoutput: column kind ${kind} (binary values are not requested)`);
    }
    return values;
  }
}

export function decodePgoutput(data: Buffer): PgoutputMessage {
  const r = new Reader(data);
  const tag = String.fromCharCode(r.byte());
  switch (tag) {
    case 'B': {
      const finalLsn = r.int64();
      const commitTime = r.time();
      return { tag: 'begin', finalLsn, commitTime, xid: r.int32() };
    }
    case 'C': {
      r.byte();
      const commitLsn = r.int64();
      const endLsn = r.int64();
      return { tag: 'commit', commitLsn, endLsn, commitTime: r.time() };
    }
    case 'R': {
      const oid = r.uint32();
      const schema = r.string();
      const name = r.string();
      r.byte();
      const n = r.int16();
      const columns: Relation['columns'] = [];
      for (let i = 0; i < n; i++) {
        const flags = r.byte();
        const column = r.string();
        const typeOid = r.uint32();
        r.int32();
        columns.push({ name: column, key: (flags & 1) === 1, typeOid });
      }
      return { tag: 'relation', relation: { oid, schema, name, columns } };
    }
    case 'I': {
      const oid = r.uint32();
      r.byte();
      return { tag: 'insert', oid, row: r.tuple() };
    }
    case 'U': {
      const oid = r.uint32();
      let kind = String.fromCharCode(r.byte());
      let oldKey: TupleValue[] | null = null;
      if (kind === 'K' || kind === 'O') {
        oldKey = r.tuple();
        kind = String.fromCharCode(r.byte());
      }
      return { tag: 'update', oid, oldKey, row: r.tuple() };
    }
    case 'D': {
      const oid = r.uint32();
      r.byte();
      return { tag: 'delete', oid, oldKey: r.tuple() };
    }
    case 'T': {
      const n = r.int32();
      r.byte();
      const oids: number[] = [];
      for (let i = 0; i < n; i++) oids.push(r.uint32());
      return { tag: 'truncate', oids };
    }
    default:
      return { tag: 'other' };
  }
}

/** An LSN as PostgreSQL prints it (`16/B374D848`). */
export function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

export function parseLsn(text: string): bigint {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}
