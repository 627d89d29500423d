import type { ParseResult } from '@pgsql/types';
import { ShardflakeError } from '../errors/errors.js';

/**
 * PostgreSQL's own parser (libpg-query: its grammar compiled to WebAssembly, no native build), loaded on first use
 * only (≈ 1 s to load and compile, which an application that never needs it should not pay, nor at import).
 *
 * An optional peer dependency of `shardflake` (≈ 3 MB an app that needs neither `router.sql` nor
 * `router.withReference` should not carry): a feature that needs it and finds it absent fails with
 * MISSING_PACKAGE naming the feature and the install command, on every call (a failed load is not remembered).
 */
export interface PgParser {
  parse(text: string): Promise<ParseResult>;
}

let parser: Promise<PgParser> | undefined;

/** The parser; `feature` and `install` word the MISSING_PACKAGE error when libpg-query is not installed. */
export function loadPgParser(feature: string, install: string): Promise<PgParser> {
  parser ??= import('libpg-query').then(
    (module) => ({ parse: (text: string) => module.parse(text) }),
    (error: unknown) => {
      parser = undefined;
      throw error;
    },
  );
  return parser.catch((error: unknown) => {
    throw missingPackage(error, 'libpg-query', feature, install);
  });
}

/** A module that is not installed as MISSING_PACKAGE naming who needs it and how to install it; others unchanged. */
export function missingPackage(error: unknown, name: string, feature: string, install: string): unknown {
  const code = (error as { code?: string }).code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return error;
  return new ShardflakeError(
    'MISSING_PACKAGE',
    `${feature} needs the package ${name}, which is not installed: npm install ${install}`,
    { cause: error },
  );
}
