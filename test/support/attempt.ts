import { connect } from '../../packages/shardflake/src/postgres/connect.js';

/** Runs `sql` as a fresh session on `url` and returns the SQLSTATE it failed with, or 'ok'. */
export async function attempt(url: string, sql: string): Promise<string> {
  const c = await connect(url);
  try {
    await c.query(sql);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String((error as Error).message);
  } finally {
    await c.end();
  }
}
