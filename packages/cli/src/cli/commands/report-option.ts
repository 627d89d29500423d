import { writeFile } from 'node:fs/promises';
import type { ReportSection } from '../../bench/report.js';

/**
 * `--report FILE.html` for the benchmarks whose results are a table of figures: the result becomes a section of
 * the same self-contained HTML report `bench inserts` writes (charts rendered server-side with vega-lite).
 * The report module (vega) is loaded only when a report is asked for.
 */
export async function writeBenchReport(
  file: string,
  title: string,
  sections: ReportSection[],
): Promise<void> {
  const { renderReport } = await import('../../bench/report.js');
  await writeFile(file, await renderReport({ title, sections }));
  process.stderr.write(`report: ${file}\n`);
}
