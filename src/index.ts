/**
 * shardflake's public API. Everything a user imports comes from here, with types.
 */

export type { ErrorCode, ErrorDetails } from './errors.js';
export { ERROR_CODES, isShardflakeError, redactSecrets, ShardflakeError } from './errors.js';
export type { FieldKind, FieldSpec, Layout, LayoutField, LayoutSpec, PresetName } from './ids/layout.js';

// ids
export { defineLayout, FIELD_KINDS, layouts, PRESET_NAMES, resolveLayout, withEpoch } from './ids/layout.js';
export type { ConnectOptions, Queryable } from './postgres/connect.js';
export { connect, createPool, describeUrl } from './postgres/connect.js';
export type { EmbeddedOptions, EmbeddedServer } from './postgres/embedded.js';
export { freePort, startEmbeddedServer, startEmbeddedServers } from './postgres/embedded.js';
// postgres
export { quoteIdent, validateIdentifier } from './postgres/identifier.js';
export type { GeneratorOptions, GeneratorPlan } from './postgres/generator-sql.js';
export { GENERATOR_VERSION, generatorPlan, generatorSql } from './postgres/generator-sql.js';
export type { InstalledGenerator } from './postgres/install.js';
export { ensureGeneratorAbove, installGenerator, lastIssuedId, readInstalledGenerator } from './postgres/install.js';
export { VERSION } from './version.js';
