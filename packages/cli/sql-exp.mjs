import { connect } from 'shardflake/internal/postgres/connect.js';
import { readFileSync } from 'node:fs';
const a = await connect(readFileSync('/tmp/perf/url', 'utf8'));
const text = readFileSync('/tmp/perf/stmt.sql', 'utf8');
const r = await a.query(`EXPLAIN (ANALYZE, SUMMARY) ${text}`, [100]);
const lines = r.rows.map((x) => x['QUERY PLAN']);
console.log(lines.slice(0, 12).join('\n')); console.log(lines.slice(-6).join('\n'));
await a.end();
