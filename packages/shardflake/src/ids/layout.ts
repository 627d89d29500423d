import { expectObject, expectString, kindOf, shown } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';

/**
 * A 64-bit id layout, written once as data: a custom epoch, a time unit and the fields from the most significant
 * bit down. Every encoder, decoder, SQL generator and doc table derives its shifts and masks from this one
 * description — no shift constant appears anywhere else.
 */
export const FIELD_KINDS = ['time', 'shard', 'worker', 'process', 'machine', 'sequence'] as const;
/** What a field of an id layout holds, one of `FIELD_KINDS`. */
export type FieldKind = (typeof FIELD_KINDS)[number];

/** One field of a layout as you write it for `defineLayout`: its kind, width and name. */
export interface FieldSpec {
  /** Name used in decoded output (`shard`, `worker`, `sequence`, …). Defaults to the kind. */
  name?: string;
  /**
   * What the field holds: exactly one `time` field (first), at most one `sequence`, and any shard/worker/…
   * fields.
   */
  kind: FieldKind;
  /** The field's width in bits, a positive whole number; all fields together fit in 64. */
  bits: number;
}

/**
 * A 64-bit id layout as you write it: name, epoch, tick length and fields from the most significant bit down;
 * `defineLayout` checks it.
 */
export interface LayoutSpec {
  /** The layout's name, shown in decoded ids and `cluster status` (`custom` when a spec leaves it out). */
  name?: string;
  /** Milliseconds since the Unix epoch at which the time field is zero. */
  epoch: number;
  /** Length of one time tick in milliseconds (1 for most layouts, 10 for Sonyflake). */
  timeUnitMs: number;
  /** Fields from the most significant bit to the least. The first must be the time field. */
  fields: readonly FieldSpec[];
}

/** A field of a defined layout, with the shift and mask every encoder, decoder and SQL generator derives from it. */
export interface LayoutField {
  /** The field's name in decoded output: the spec's name, or its kind when the spec gave none. */
  readonly name: string;
  /** What the field holds (`time`, `shard`, `worker`, `process`, `machine` or `sequence`). */
  readonly kind: FieldKind;
  /** The field's width in bits. */
  readonly bits: number;
  /** Position of the field's lowest bit. */
  readonly shift: number;
  /** Largest value the field holds: 2^bits − 1. */
  readonly max: bigint;
}

/**
 * A checked 64-bit id layout: its fields with their shifts, and when its ids turn negative in a signed bigint and
 * when its time field runs out. The presets are in `layouts`.
 */
export interface Layout {
  /** The layout's name: a preset's (`instagram`, …), the spec's, or `custom`. */
  readonly name: string;
  /** Milliseconds since 1970 at which the time field is zero (a cluster's config may move it). */
  readonly epoch: number;
  /** Length of one time tick in milliseconds (1 for most layouts, 10 for Sonyflake). */
  readonly timeUnitMs: number;
  /** The fields from the most significant bit down, the time field first. */
  readonly fields: readonly LayoutField[];
  /** The sum of the fields' widths, at most 64 (fewer leaves the sign bit of a bigint unused). */
  readonly totalBits: number;
  /** The time field, always the first and most significant: ticks since `epoch`. */
  readonly time: LayoutField;
  /** The sequence field, if the layout has one (a generator needs it). */
  readonly sequence: LayoutField | undefined;
  /** The first instant the time field cannot represent. */
  readonly exhaustsAt: Date;
  /**
   * For layouts that use the 64th bit: the first instant whose ids no longer fit a signed 64-bit integer
   * (Postgres `bigint`) and would turn negative. `null` when the layout leaves the sign bit alone.
   */
  readonly signedOverflowAt: Date | null;
  /** Largest tick (time field value) whose ids still fit a signed bigint. */
  readonly maxSignedTick: bigint;
  /** Field by name. */
  field(name: string): LayoutField | undefined;
}

export const MAX_LAYOUT_BITS = 64;

function invalid(layoutName: string, reason: string): ShardflakeError {
  return new ShardflakeError('INVALID_LAYOUT', `layout ${JSON.stringify(layoutName)}: ${reason}`);
}

/** Validates a layout description and derives shifts, masks and the dates its ids run out. */
export function defineLayout(spec: LayoutSpec): Layout {
  expectObject(spec, 'a layout', 'INVALID_LAYOUT');
  const name =
    spec.name === undefined ? 'custom' : expectString(spec.name, 'a layout name', 'INVALID_LAYOUT');
  if (!Number.isSafeInteger(spec.epoch))
    throw invalid(name, 'epoch must be an integer number of milliseconds');
  if (!(Number.isInteger(spec.timeUnitMs) && spec.timeUnitMs >= 1)) {
    throw invalid(name, 'timeUnitMs must be a positive integer');
  }
  if (!Array.isArray(spec.fields) || spec.fields.length === 0)
    throw invalid(name, 'needs at least a time field');
  const names = new Set<string>();
  let totalBits = 0;
  for (const [i, f] of spec.fields.entries()) {
    expectObject(f, `layout ${JSON.stringify(name)}: field ${i + 1}`, 'INVALID_LAYOUT');
    if (!FIELD_KINDS.includes(f.kind)) {
      throw invalid(name, `unknown field kind ${shown(f.kind)} (one of ${FIELD_KINDS.join(', ')})`);
    }
    if (f.name !== undefined)
      expectString(f.name, `layout ${JSON.stringify(name)}: a field name`, 'INVALID_LAYOUT');
    if (!(Number.isInteger(f.bits) && f.bits >= 1)) {
      throw invalid(name, `field ${f.name ?? f.kind} needs a positive whole number of bits`);
    }
    const fieldName = f.name ?? f.kind;
    if (names.has(fieldName)) throw invalid(name, `field name ${fieldName} appears twice`);
    names.add(fieldName);
    totalBits += f.bits;
  }
  if (totalBits > MAX_LAYOUT_BITS) {
    throw new ShardflakeError(
      'LAYOUT_TOO_WIDE',
      `layout ${JSON.stringify(name)} needs ${totalBits} bits, more than the ${MAX_LAYOUT_BITS} of a 64-bit id`,
    );
  }
  if (spec.fields[0]?.kind !== 'time') throw invalid(name, 'the first (most significant) field must be time');
  if (spec.fields.filter((f) => f.kind === 'time').length !== 1)
    throw invalid(name, 'needs exactly one time field');
  if (spec.fields.filter((f) => f.kind === 'sequence').length > 1)
    throw invalid(name, 'has more than one sequence field');

  let shift = totalBits;
  const fields: LayoutField[] = spec.fields.map((f) => {
    shift -= f.bits;
    return Object.freeze({
      name: f.name ?? f.kind,
      kind: f.kind,
      bits: f.bits,
      shift,
      max: (1n << BigInt(f.bits)) - 1n,
    });
  });
  const time = fields[0] as LayoutField;
  const unit = BigInt(spec.timeUnitMs);
  const epoch = BigInt(spec.epoch);
  const exhaustsAt = new Date(Number(epoch + (time.max + 1n) * unit));
  // With all 64 bits in use, the top bit of the time field is the sign bit of a bigint column.
  const usesSignBit = totalBits === MAX_LAYOUT_BITS;
  const maxSignedTick = usesSignBit ? (1n << BigInt(time.bits - 1)) - 1n : time.max;
  const signedOverflowAt = usesSignBit ? new Date(Number(epoch + (maxSignedTick + 1n) * unit)) : null;
  const byName = new Map(fields.map((f) => [f.name, f]));

  const layout: Layout = Object.freeze({
    name,
    epoch: spec.epoch,
    timeUnitMs: spec.timeUnitMs,
    fields: Object.freeze(fields),
    totalBits,
    time,
    sequence: fields.find((f) => f.kind === 'sequence'),
    exhaustsAt,
    signedOverflowAt,
    maxSignedTick,
    field: (fieldName: string) => byName.get(fieldName),
  });
  defined.add(layout);
  return layout;
}

/**
 * Every layout defineLayout has made. resolveLayout passes these through as they are; anything else that looks
 * like a layout is checked by defineLayout again, so an object with a `totalBits` of the wrong kind cannot get
 * past validation.
 */
const defined = new WeakSet<Layout>();

/**
 * The presets. Epochs and widths are the published ones:
 * - instagram: "Sharding & IDs at Instagram" (2012), epoch 2011-08-24T21:07:01.721Z.
 * - snowflake: Twitter's Snowflake (2010), epoch 2010-11-04T01:42:54.657Z; 1 unused sign bit.
 * - discord: Discord's API docs, epoch 2015-01-01; worker 5 bits + process 5 bits.
 * - sonyflake: sony/sonyflake, epoch 2014-09-01T00:00:00Z, 10 ms ticks, sequence above machine id.
 */
export const layouts = Object.freeze({
  /**
   * Instagram's: 41-bit ms time since 2011-08-24, 13-bit shard, 10-bit sequence; the default for clusters.
   */
  instagram: defineLayout({
    name: 'instagram',
    epoch: 1314220021721,
    timeUnitMs: 1,
    fields: [
      { kind: 'time', bits: 41 },
      { kind: 'shard', bits: 13 },
      { kind: 'sequence', bits: 10 },
    ],
  }),
  /**
   * Twitter's Snowflake: 41-bit ms time since 2010-11-04, 10-bit worker, 12-bit sequence; sign bit unused.
   */
  snowflake: defineLayout({
    name: 'snowflake',
    epoch: 1288834974657,
    timeUnitMs: 1,
    fields: [
      { kind: 'time', bits: 41 },
      { kind: 'worker', bits: 10 },
      { kind: 'sequence', bits: 12 },
    ],
  }),
  /** Discord's: 42-bit ms time since 2015-01-01, 5-bit worker, 5-bit process, 12-bit `increment` sequence. */
  discord: defineLayout({
    name: 'discord',
    epoch: 1420070400000,
    timeUnitMs: 1,
    fields: [
      { kind: 'time', bits: 42 },
      { kind: 'worker', bits: 5 },
      { kind: 'process', bits: 5 },
      { kind: 'sequence', name: 'increment', bits: 12 },
    ],
  }),
  /** Sonyflake: 39-bit time in 10 ms ticks since 2014-09-01, 8-bit sequence, 16-bit machine id. */
  sonyflake: defineLayout({
    name: 'sonyflake',
    epoch: 1409529600000,
    timeUnitMs: 10,
    fields: [
      { kind: 'time', bits: 39 },
      { kind: 'sequence', bits: 8 },
      { kind: 'machine', bits: 16 },
    ],
  }),
});

/** The name of a preset layout: `instagram`, `snowflake`, `discord` or `sonyflake`. */
export type PresetName = keyof typeof layouts;
/** The names of the preset layouts in `layouts`. */
export const PRESET_NAMES = Object.keys(layouts) as PresetName[];

/** A preset name, a layout spec, or an already-defined layout → a validated Layout. */
export function resolveLayout(layout: PresetName | string | LayoutSpec | Layout = 'instagram'): Layout {
  if (typeof layout === 'string') {
    // Own properties only: 'constructor' or '__proto__' must not find Object's.
    const preset = Object.hasOwn(layouts, layout) ? (layouts as Record<string, Layout>)[layout] : undefined;
    if (!preset) {
      throw new ShardflakeError(
        'INVALID_LAYOUT',
        `unknown layout ${JSON.stringify(layout)} (presets: ${PRESET_NAMES.join(', ')})`,
      );
    }
    return preset;
  }
  if (typeof layout !== 'object' || layout === null || Array.isArray(layout)) {
    throw new ShardflakeError(
      'INVALID_LAYOUT',
      `a layout must be a preset name (${PRESET_NAMES.join(', ')}) or a layout object, not ${kindOf(layout)}`,
    );
  }
  if (defined.has(layout as Layout)) return layout as Layout;
  return defineLayout(layout as LayoutSpec);
}

/** The same layout with another epoch (the cluster config and `sql generator --epoch` use this). */
export function withEpoch(layoutInput: Layout, epoch: number): Layout {
  const layout = resolveLayout(layoutInput);
  return defineLayout({ name: layout.name, epoch, timeUnitMs: layout.timeUnitMs, fields: layout.fields });
}
