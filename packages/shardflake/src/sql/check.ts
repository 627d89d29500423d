import type { Node, SelectStmt } from '@pgsql/types';
import { unsupported } from './refuse.js';
import { functionName, kindOf, walk } from './tree.js';

/**
 * What router.sql refuses before anything is sent, and why each refusal keeps answers exact: a query is answered
 * by running a part of it in every shard and combining the parts in the router, so anything whose value in one
 * shard depends on rows of another (subqueries, window functions, set operations), or whose value would differ
 * from server to server (the clock, random numbers, sequences), or that changes data, is refused.
 */

/** The aggregates the router knows how to combine from per-shard parts. */
export const COMBINABLE = ['count', 'sum', 'min', 'max', 'avg', 'bool_and', 'bool_or', 'every'];

/** Built-in aggregates that do not decompose into per-shard parts (or that the router does not combine). */
const OTHER_AGGREGATES = new Set([
  'array_agg',
  'string_agg',
  'json_agg',
  'jsonb_agg',
  'json_object_agg',
  'jsonb_object_agg',
  'xmlagg',
  'percentile_cont',
  'percentile_disc',
  'mode',
  'rank',
  'dense_rank',
  'percent_rank',
  'cume_dist',
  'stddev',
  'stddev_pop',
  'stddev_samp',
  'variance',
  'var_pop',
  'var_samp',
  'corr',
  'covar_pop',
  'covar_samp',
  'regr_avgx',
  'regr_avgy',
  'regr_count',
  'regr_intercept',
  'regr_r2',
  'regr_slope',
  'regr_sxx',
  'regr_sxy',
  'regr_syy',
  'bit_and',
  'bit_or',
  'bit_xor',
  'any_value',
  'range_agg',
  'range_intersect_agg',
  'json_agg_strict',
  'jsonb_agg_strict',
  'json_objectagg',
  'json_arrayagg',
]);

/** Functions whose value differs between servers or calls, or that change something. */
const VOLATILE = new Set([
  'random',
  'random_normal',
  'setseed',
  'now',
  'statement_timestamp',
  'transaction_timestamp',
  'clock_timestamp',
  'timeofday',
  'nextval',
  'currval',
  'lastval',
  'setval',
  'gen_random_uuid',
  'uuidv4',
  'uuidv7',
  'uuid_generate_v1',
  'uuid_generate_v4',
  'txid_current',
  'txid_current_if_assigned',
  'pg_current_xact_id',
  'pg_backend_pid',
  'inet_server_addr',
  'inet_server_port',
  'pg_postmaster_start_time',
  'pg_sleep',
  'pg_sleep_for',
  'pg_sleep_until',
  'set_config',
  'current_setting',
  'next_id',
  'pg_advisory_lock',
  'pg_advisory_xact_lock',
  'pg_try_advisory_lock',
  'pg_try_advisory_xact_lock',
  'pg_notify',
  'dblink',
  'dblink_exec',
  'lo_import',
  'lo_export',
  'pg_read_file',
  'pg_terminate_backend',
  'pg_cancel_backend',
  'version',
  'current_database',
  'pg_current_wal_lsn',
]);

/** Expression node kinds that are evaluated row by row in a shard, with nothing from other shards. */
const ROW_EXPRESSIONS = new Set([
  'ColumnRef',
  'A_Const',
  'ParamRef',
  'A_Expr',
  'BoolExpr',
  'NullTest',
  'BooleanTest',
  'TypeCast',
  'FuncCall',
  'CaseExpr',
  'CaseWhen',
  'CoalesceExpr',
  'MinMaxExpr',
  'NullIfExpr',
  'A_ArrayExpr',
  'RowExpr',
  'A_Indirection',
  'A_Indices',
  'CollateClause',
  'String',
  'Integer',
  'Float',
  'Boolean',
  'TypeName',
  'A_Star',
  'SQLValueFunction',
  'List',
  'BitString',
]);

const SQL_VALUE_REFUSED: Record<string, string> = {
  SVFOP_CURRENT_DATE: 'CURRENT_DATE',
  SVFOP_CURRENT_TIME: 'CURRENT_TIME',
  SVFOP_CURRENT_TIME_N: 'CURRENT_TIME',
  SVFOP_CURRENT_TIMESTAMP: 'CURRENT_TIMESTAMP',
  SVFOP_CURRENT_TIMESTAMP_N: 'CURRENT_TIMESTAMP',
  SVFOP_LOCALTIME: 'LOCALTIME',
  SVFOP_LOCALTIME_N: 'LOCALTIME',
  SVFOP_LOCALTIMESTAMP: 'LOCALTIMESTAMP',
  SVFOP_LOCALTIMESTAMP_N: 'LOCALTIMESTAMP',
  SVFOP_CURRENT_SCHEMA: 'CURRENT_SCHEMA',
  SVFOP_CURRENT_CATALOG: 'CURRENT_CATALOG',
};

/** Whether a FuncCall is an aggregate call (combinable or not). */
export function isAggregateCall(node: Node): boolean {
  if (!('FuncCall' in node) || node.FuncCall.over) return false;
  const name = functionName(node) ?? '';
  return (
    COMBINABLE.includes(name) ||
    OTHER_AGGREGATES.has(name) ||
    node.FuncCall.agg_star === true ||
    node.FuncCall.agg_distinct === true ||
    node.FuncCall.agg_within_group === true ||
    node.FuncCall.agg_filter !== undefined ||
    (node.FuncCall.agg_order?.length ?? 0) > 0
  );
}

/** Checks an expression that runs in every shard; `aggregates` says whether aggregate calls may appear in it. */
export function checkExpression(node: Node | undefined, where: string, aggregates: boolean): void {
  if (!node) return;
  for (const { node: n } of walk(node)) {
    const kind = kindOf(n);
    if (kind === 'SubLink') unsupported(`a subquery in ${where} (it could need rows of other shards)`);
    if (kind === 'GroupingFunc') unsupported('GROUPING()');
    if (!ROW_EXPRESSIONS.has(kind)) unsupported(`${kind} in ${where}`);
    if ('SQLValueFunction' in n) {
      const op = n.SQLValueFunction.op ?? '';
      const name = SQL_VALUE_REFUSED[op];
      if (name)
        unsupported(`${name} (each server would read its own clock or name; pass the value as a parameter)`);
    }
    if ('FuncCall' in n) {
      const name = functionName(n) ?? '';
      if (n.FuncCall.over) unsupported(`the window function ${name}() (windows span shards)`);
      if (VOLATILE.has(name))
        unsupported(
          `${name}() (its value would differ from server to server; pass the value as a parameter)`,
        );
      if (n.FuncCall.agg_within_group)
        unsupported(`the ordered-set aggregate ${name}() (it does not decompose)`);
      if (isAggregateCall(n)) {
        if (!aggregates) unsupported(`the aggregate ${name}() in ${where}`);
        if (OTHER_AGGREGATES.has(name))
          unsupported(
            `the aggregate ${name}() (only ${COMBINABLE.filter((a) => a !== 'every').join(', ')} combine exactly across shards)`,
          );
        if (!COMBINABLE.includes(name)) unsupported(`the aggregate ${name}()`);
        if ((n.FuncCall.agg_order?.length ?? 0) > 0) unsupported(`ORDER BY inside ${name}()`);
        if (n.FuncCall.agg_distinct && name !== 'count')
          unsupported(`${name}(DISTINCT …) (only count(DISTINCT …) is combined exactly)`);
        for (const arg of n.FuncCall.args ?? []) checkExpression(arg, `the arguments of ${name}()`, false);
        checkExpression(n.FuncCall.agg_filter, `the FILTER of ${name}()`, false);
      }
    }
  }
}

/** The statement-level refusals: set operations, CTEs, locking, INTO, windows, VALUES, grouping sets. */
export function checkStatement(select: SelectStmt): void {
  if (select.op && select.op !== 'SETOP_NONE')
    unsupported(`${select.op.replace('SETOP_', '')} (set operations across shards)`);
  if (select.withClause) unsupported('WITH (common table expressions)');
  if (select.intoClause) unsupported('SELECT INTO (it writes)');
  if (select.lockingClause?.length) unsupported('FOR UPDATE/SHARE (locks across shards)');
  if (select.windowClause?.length) unsupported('WINDOW (window functions span shards)');
  if (select.valuesLists?.length) unsupported('VALUES');
  if (select.limitOption === 'LIMIT_OPTION_WITH_TIES') unsupported('FETCH … WITH TIES');
  if (select.groupDistinct) unsupported('GROUP BY DISTINCT');
  for (const item of select.groupClause ?? [])
    if ('GroupingSet' in item) unsupported('GROUPING SETS, ROLLUP and CUBE');
  if (!select.fromClause?.length) unsupported('a SELECT without FROM (it reads no sharded table)');
}

/** Refuses a DISTINCT ON. */
export function checkDistinct(select: SelectStmt): boolean {
  const distinct = select.distinctClause;
  if (!distinct) return false;
  // `SELECT DISTINCT` parses as a list holding one empty node; DISTINCT ON lists its expressions.
  if (distinct.length === 1 && Object.keys(distinct[0] as object).length === 0) return true;
  return unsupported('DISTINCT ON');
}
