import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';

/**
 * The JSON Schema the package ships for the cluster config (packages/shardflake/config.schema.json, made by
 * scripts/config-schema.mjs from the validator's definition), compiled by a real JSON Schema validator (ajv), as an
 * editor would use it.
 */
export const SHIPPED_SCHEMA_FILE = 'packages/shardflake/config.schema.json';

const validate = new Ajv({ allErrors: true }).compile(JSON.parse(readFileSync(SHIPPED_SCHEMA_FILE, 'utf8')));

/** null when the JSON Schema accepts `config`, else ajv's errors as JSON (for an assertion message). */
export function jsonSchemaErrors(config: unknown): string | null {
  return validate(config) ? null : JSON.stringify(validate.errors);
}
