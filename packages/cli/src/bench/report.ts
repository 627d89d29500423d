import * as vega from 'vega';
import * as vl from 'vega-lite';
import type { EngineResult, InsertBenchResult, TypeResult } from './inserts.js';

/**
 * One self-contained HTML file for people to look at: charts made with vega-lite, rendered to SVG on the server
 * (vega's headless View) and inlined, so the file opens anywhere with no script and no network.
 *
 * The insert benchmark gets its own charts (latency against insert count with the fitted line per type, like
 * the paper's figures 1–3; throughput, index size, WAL and full-page-image bars). Any other benchmark's JSON
 * result becomes a generic section: a table of its values and, when given, a bar chart.
 */

export interface ReportBar {
  label: string;
  value: number;
}

export interface BarChart {
  title: string;
  unit?: string;
  values: ReportBar[];
  /** A goal drawn as a dashed vertical line across the bars. */
  target?: number;
  /** A log axis, for figures that span orders of magnitude (a 1 ms p50 beside a 300 ms pause). */
  log?: boolean;
}

export interface ReportSection {
  title: string;
  description?: string;
  /** Any JSON-able result; shown as a table of its leaf values (bigints as strings). */
  result: unknown;
  /** Optional bar chart(s) drawn above the table. */
  bars?: BarChart | BarChart[];
}

export interface ReportInput {
  title?: string;
  inserts?: InsertBenchResult;
  sections?: ReportSection[];
  generatedAt?: Date;
}

type Spec = vl.TopLevelSpec;

const CONFIG = {
  font: 'DejaVu Sans, Arial, sans-serif',
  view: { stroke: '#ddd' },
  axis: { labelFontSize: 11, titleFontSize: 12 },
} as const;

/** Renders a vega-lite spec to an SVG string without a browser. */
export async function renderSvg(spec: Spec): Promise<string> {
  const compiled = vl.compile({ ...spec, config: { ...CONFIG, ...(spec.config ?? {}) } } as Spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

const escapeHtml = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string,
  );

const fmt = (value: number | undefined, digits = 1): string =>
  value === undefined || !Number.isFinite(value)
    ? '–'
    : value.toLocaleString('en-US', { maximumFractionDigits: digits });

/** Latency vs insert count, one panel per type, sampled points plus the least-squares line. */
export function latencySpec(engine: EngineResult): Spec {
  const values: Record<string, unknown>[] = [];
  for (const t of engine.types) {
    for (const [x, y] of t.points) values.push({ type: t.type, kind: 'point', x, y });
    for (const [x, y] of t.medians ?? []) values.push({ type: t.type, kind: 'median', x, y });
    const last = t.rows - 1;
    values.push({ type: t.type, kind: 'fit', x: 0, y: t.interceptNs / 1000 });
    values.push({ type: t.type, kind: 'fit', x: last, y: (t.interceptNs + t.slopeNsPerRow * last) / 1000 });
  }
  // Outliers (a checkpoint, a neighbour's burst) would flatten every panel; the scale stops at the worst p99.
  const top = Math.max(...engine.types.map((t) => t.p99Us)) * 1.3;
  return {
    title: `${engineName(engine)}: latency per insert vs insert count (dots: sampled inserts; black: median of each 1/50 of the run; red: least squares)`,
    data: { values },
    facet: { field: 'type', type: 'nominal', title: null, sort: engine.types.map((t) => t.type) },
    columns: 3,
    spec: {
      width: 260,
      height: 160,
      layer: [
        {
          transform: [{ filter: "datum.kind === 'point'" }],
          mark: { type: 'circle', size: 8, opacity: 0.35, clip: true, color: '#4c78a8' },
          encoding: {
            x: { field: 'x', type: 'quantitative', title: 'insert #' },
            y: { field: 'y', type: 'quantitative', title: 'latency (µs)', scale: { domain: [0, top] } },
          },
        },
        {
          transform: [{ filter: "datum.kind === 'median'" }],
          mark: { type: 'line', color: '#222', strokeWidth: 1, opacity: 0.7, clip: true },
          encoding: { x: { field: 'x', type: 'quantitative' }, y: { field: 'y', type: 'quantitative' } },
        },
        {
          transform: [{ filter: "datum.kind === 'fit'" }],
          mark: { type: 'line', color: '#e45756', strokeWidth: 2, clip: true },
          encoding: { x: { field: 'x', type: 'quantitative' }, y: { field: 'y', type: 'quantitative' } },
        },
      ],
    },
  } as Spec;
}

/** Horizontal bars of one number per label (with `target`, a dashed line at that value). */
export function barSpec(
  title: string,
  unit: string,
  values: ReportBar[],
  options: Pick<BarChart, 'target' | 'log'> = {},
): Spec {
  const x = {
    field: 'value',
    type: 'quantitative',
    title: unit,
    // Bars on a log axis start at the axis's low end: there is no 0 to stack them from.
    ...(options.log ? { scale: { type: 'log' }, stack: null } : {}),
  };
  const bars = {
    // A log axis has no place for 0 (an empty latency summary, say): such a bar is left out, the table keeps it.
    data: { values: options.log ? values.filter((v) => v.value > 0) : values },
    mark: { type: 'bar', color: '#4c78a8' },
    encoding: {
      y: { field: 'label', type: 'nominal', title: null, sort: null, axis: { labelLimit: 260 } },
      x,
      tooltip: [{ field: 'label' }, { field: 'value' }],
    },
  };
  if (options.target === undefined) return { title, width: 360, height: { step: 16 }, ...bars } as Spec;
  const rule = {
    data: { values: [{ value: options.target }] },
    mark: { type: 'rule', color: '#e45756', strokeDash: [4, 3], strokeWidth: 2 },
    encoding: { x: { field: 'value', type: 'quantitative' } },
  };
  return { title, width: 360, height: { step: 16 }, layer: [bars, rule] } as Spec;
}

const engineName = (e: EngineResult) => (e.engine === 'postgres' ? 'PostgreSQL' : 'MariaDB (InnoDB)');

function typeBars(engine: EngineResult, pick: (t: TypeResult) => number | undefined): ReportBar[] {
  return engine.types.flatMap((t) => {
    const value = pick(t);
    return value === undefined || !Number.isFinite(value) ? [] : [{ label: t.type, value }];
  });
}

function insertTable(engine: EngineResult): string {
  const head = [
    'type',
    'rows',
    'slope ns/row [95% CI]',
    'intercept ms',
    'p50 µs',
    'p99 µs',
    'rows/s',
    'pk index MB',
    'leaf fill %',
    'WAL B/row',
    'FPI/row',
    'blocks read/row',
    'splits/1k rows',
  ];
  const rows = engine.types.map((t) => [
    t.type,
    fmt(t.rows, 0),
    `${fmt(t.slopeNsPerRow, 3)} [${fmt(t.slopeCi.low, 3)}, ${fmt(t.slopeCi.high, 3)}]`,
    fmt(t.interceptNs / 1e6, 3),
    fmt(t.p50Us),
    fmt(t.p99Us),
    fmt(t.rowsPerSecond, 0),
    fmt(t.indexBytes / 2 ** 20, 2),
    fmt(t.leafDensity),
    fmt(t.perRow.logBytes, 0),
    fmt(t.perRow.fullPageImages, 3),
    fmt(t.perRow.blocksRead, 3),
    fmt(t.perRow.pageSplits === undefined ? undefined : t.perRow.pageSplits * 1000, 1),
  ]);
  return htmlTable(head, rows);
}

function htmlTable(head: string[], rows: string[][]): string {
  const th = head.map((h) => `<th>${escapeHtml(h)}</th>`).join('');
  const body = rows.map((r) => `<tr>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`).join('\n');
  return `<table><thead><tr>${th}</tr></thead><tbody>\n${body}\n</tbody></table>`;
}

function paperTable(result: InsertBenchResult): string {
  const pg = result.engines.find((e) => e.engine === 'postgres');
  const rows = Object.entries(result.paper).map(([name, p]) => {
    const ours = pg?.types.find((t) => t.type === p.ours);
    return [
      name,
      fmt(p.slope, 3),
      fmt(p.intercept / 1e6, 3),
      p.ours,
      ours
        ? `${fmt(ours.slopeNsPerRow, 3)} [${fmt(ours.slopeCi.low, 3)}, ${fmt(ours.slopeCi.high, 3)}]`
        : 'not run',
      ours ? fmt(ours.interceptNs / 1e6, 3) : '–',
    ];
  });
  return htmlTable(
    [
      'paper',
      'paper slope ns/row',
      'paper intercept ms',
      'ours',
      'our slope ns/row [95% CI]',
      'our intercept ms',
    ],
    rows,
  );
}

async function insertSection(result: InsertBenchResult): Promise<string> {
  const parts: string[] = [
    '<h2>Insert experiment (seed 002, extended)</h2>',
    `<p>Mode <b>${escapeHtml(result.mode)}</b>: ${fmt(result.rows, 0)} timed single-row inserts per type` +
      (result.preload ? ` after ${fmt(result.preload, 0)} preloaded rows` : '') +
      `, interleaved in batches of ${fmt(result.batch, 0)} in shuffled order (seed ${result.seed}); ` +
      `${result.machine.cpus} CPUs, ${result.machine.memoryGiB} GiB, Node ${escapeHtml(result.machine.node)}, ` +
      `load average at the end ${result.machine.loadAverage.join(' / ')}; took ${fmt(result.durationSeconds)} s.` +
      (result.interrupted ? ' <b>Interrupted: partial results.</b>' : '') +
      '</p>',
  ];
  parts.push('<h3>Against the paper (table 1)</h3>', paperTable(result));
  for (const engine of result.engines) {
    parts.push(`<h3>${escapeHtml(engineName(engine))}</h3>`, `<p>${escapeHtml(engine.description)}</p>`);
    parts.push(`<ul>${engine.notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul>`);
    parts.push(insertTable(engine));
    if (engine.types.length === 0) continue;
    const charts: Spec[] = [
      latencySpec(engine),
      barSpec(
        'throughput',
        'rows/s',
        typeBars(engine, (t) => t.rowsPerSecond),
      ),
      barSpec(
        'primary-key index size',
        'MB',
        typeBars(engine, (t) => t.indexBytes / 2 ** 20),
      ),
      barSpec(
        engine.engine === 'postgres' ? 'WAL per insert' : 'redo log per insert',
        'bytes',
        typeBars(engine, (t) => t.perRow.logBytes),
      ),
    ];
    const fpi = typeBars(engine, (t) => t.perRow.fullPageImages);
    if (fpi.length > 0) charts.push(barSpec('full-page images per insert', 'FPI', fpi));
    const reads = typeBars(engine, (t) => t.perRow.blocksRead);
    if (reads.length > 0)
      charts.push(barSpec('blocks read from outside the cache per insert', 'blocks', reads));
    const [latency, ...bars] = charts as [Spec, ...Spec[]];
    parts.push(`<figure class="chart">${await renderSvg(latency)}</figure>`, '<div class="bars">');
    for (const spec of bars) parts.push(`<figure class="chart">${await renderSvg(spec)}</figure>`);
    parts.push('</div>');
  }
  return parts.join('\n');
}

/** Flattens a JSON-able value to [path, value] rows for a table. */
export function flatten(value: unknown, path = ''): [string, string][] {
  if (typeof value === 'bigint') return [[path, value.toString()]];
  if (value === null || typeof value !== 'object') return [[path, String(value)]];
  if (value instanceof Date) return [[path, value.toISOString()]];
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
  if (entries.length === 0) return [[path, Array.isArray(value) ? '[]' : '{}']];
  // Short arrays of numbers read better on one line.
  if (Array.isArray(value) && value.length <= 20 && value.every((v) => typeof v === 'number')) {
    return [[path, value.join(', ')]];
  }
  return entries.flatMap(([k, v]) => flatten(v, path ? `${path}.${k}` : k));
}

async function genericSection(section: ReportSection): Promise<string> {
  const parts = [`<h2>${escapeHtml(section.title)}</h2>`];
  if (section.description) parts.push(`<p>${escapeHtml(section.description)}</p>`);
  for (const chart of section.bars === undefined ? [] : [section.bars].flat()) {
    if (chart.values.length === 0) continue;
    const spec = barSpec(chart.title, chart.unit ?? '', chart.values, chart);
    parts.push(`<figure class="chart">${await renderSvg(spec)}</figure>`);
  }
  const rows = flatten(section.result).slice(0, 2000);
  parts.push(
    htmlTable(
      ['value', ''],
      rows.map(([k, v]) => [k, v]),
    ),
  );
  return parts.join('\n');
}

const STYLE = `
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
figure.chart { margin: 12px 0; }
div.bars { display: flex; flex-wrap: wrap; gap: 8px 32px; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
`;

/** The whole report as one HTML document (no scripts, no external resources). */
export async function renderReport(input: ReportInput): Promise<string> {
  const title = input.title ?? 'shardflake benchmarks';
  const body: string[] = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p>Generated ${escapeHtml((input.generatedAt ?? new Date()).toISOString())} by shardflake.</p>`,
  ];
  if (input.inserts) body.push(await insertSection(input.inserts));
  for (const section of input.sections ?? []) body.push(await genericSection(section));
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head>
<body>
${body.join('\n')}
</body></html>
`;
}
