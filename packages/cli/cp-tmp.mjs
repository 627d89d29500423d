import { startEmbeddedServer } from '@shardflake/embedded';
import { connect } from 'shardflake/internal/postgres/connect.js';
const s = await startEmbeddedServer('a');
try {
  const c = await connect(s.url);
  await c.query('CREATE TABLE t (x int)');
  const med = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  for (const mode of ['on', 'off', 'on', 'off']) {
    await c.query(`SET synchronous_commit TO ${mode}`);
    const ts = [], cs = [];
    for (let i = 0; i < 200; i++) {
      await c.query(`BEGIN; INSERT INTO t VALUES (1); PREPARE TRANSACTION 'g${i}'`);
      let t = performance.now(); await c.query(`COMMIT PREPARED 'g${i}'`); ts.push(performance.now() - t);
      t = performance.now(); await c.query(`INSERT INTO t VALUES (2)`); cs.push(performance.now() - t);
    }
    console.log(mode, 'commit prepared', med(ts).toFixed(3), 'autocommit insert', med(cs).toFixed(3));
  }
  await c.end();
} finally { await s.stop(); }
