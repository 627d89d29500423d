// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} in plain strings is the config syntax the messages quote
/**
 * Bad cluster configs and the one line each gets, shared by config.rejects-bad-input (the validator's messages) and
 * config.json-schema-shipped-matches-the-validator (the shipped JSON Schema refuses the same shapes). Server a's URL
 * holds the password "secret", which no message may show.
 */
export const base = {
  servers: {
    a: 'postgres://postgres:secret@127.0.0.1:54001/app',
    b: 'postgres://postgres@127.0.0.1:54002/app',
  },
  catalog: 'a',
  logicalShards: 64,
  epoch: '2024-01-01T00:00:00Z',
  tables: {
    photos:
      'CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_id(), user_id bigint NOT NULL, caption text)',
  },
};

const { servers, ...withoutServers } = base;
const { logicalShards: _shards, ...withoutShards } = base;
const photos = base.tables.photos;
const IDENTIFIER = 'letters, digits and _, starting with a letter or _, at most 63 characters';

/**
 * Configs of the wrong shape, which JSON Schema can describe: both the validator and the JSON Schema refuse them.
 * Each with the validator's whole message for the source `cluster.json`.
 */
export const badShapes: [what: string, config: unknown, message: string][] = [
  ['not an object', [base], 'cluster.json: must be a JSON object'],
  [
    'an unknown field',
    { ...base, shards: 4 },
    'cluster.json: shards is not a known field (known: $schema, comment, servers, catalog, logicalShards, epoch, layout, schemaPrefix, nextIdLanguage, tables, migrations, referenceTables, referenceMigrations, lookups, adopt)',
  ],
  [
    'a required field misspelt (issue 32: the message names what was typed and what it likely means)',
    { ...withoutShards, logicalShard: 64 },
    "cluster.json: logicalShards is missing, and logicalShard is not a known field: did you mean logicalShards? (How many logical shards, 1 to 8192 (fewer when the layout's shard field is smaller); fixed once the cluster is made)",
  ],
  [
    'an optional field misspelt',
    { ...base, refrenceTables: {} },
    'cluster.json: refrenceTables is not a known field: did you mean referenceTables? (known: $schema, comment, servers, catalog, logicalShards, epoch, layout, schemaPrefix, nextIdLanguage, tables, migrations, referenceTables, referenceMigrations, lookups, adopt)',
  ],
  [
    "a lookup's field misspelt",
    { ...base, lookups: { caption: { table: 'photos', colum: 'caption' } } },
    'cluster.json: lookups.caption.column is missing, and colum is not a known field: did you mean column? (The column the lookup finds rows by (not id: rows are found by id already))',
  ],
  [
    'a $schema that is not text',
    { $schema: 7, ...base },
    'cluster.json: $schema must be a string (the path or URL of a JSON Schema)',
  ],
  [
    'no servers',
    withoutServers,
    'cluster.json: servers is missing (Each server name → its postgres:// URL, or a list of node URLs (a primary and its streaming replicas). ${VAR} in a URL is the environment variable VAR; a URL without a password uses PGPASSWORD or the pgpass file.)',
  ],
  [
    'servers as a list',
    { ...base, servers: Object.values(servers) },
    'cluster.json: servers must map each server name to a postgres:// URL or a list of node URLs',
  ],
  [
    'no server in servers',
    { ...base, servers: {} },
    'cluster.json: servers must map at least one server name to a postgres:// URL',
  ],
  [
    'a server name with a space',
    { ...base, servers: { ...servers, 'b c': servers.b } },
    'cluster.json: servers["b c"] is not a good server name: use 1–63 letters, digits, _ or -',
  ],
  [
    'a mysql URL',
    { ...base, servers: { ...servers, b: 'mysql://x' } },
    'cluster.json: servers.b needs a postgres:// URL',
  ],
  [
    'a node list holding a number',
    { ...base, servers: { a: [servers.a, 5] } },
    'cluster.json: servers.a needs a postgres:// URL or a non-empty list of node URLs (a primary and its streaming replicas)',
  ],
  [
    'an empty node list',
    { ...base, servers: { ...servers, b: [] } },
    'cluster.json: servers.b needs a postgres:// URL or a non-empty list of node URLs (a primary and its streaming replicas)',
  ],
  [
    'a catalog that is not a name',
    { ...base, catalog: 1 },
    'cluster.json: catalog must name one of the servers',
  ],
  ...[0, 8193, -1, 1.5, '64'].map((n): [string, unknown, string] => [
    `logicalShards ${JSON.stringify(n)}`,
    { ...base, logicalShards: n },
    `cluster.json: logicalShards must be a whole number from 1 to 8192, not ${JSON.stringify(n)}`,
  ]),
  ...['yesterday', -5, 1.5].map((epoch): [string, unknown, string] => [
    `epoch ${JSON.stringify(epoch)}`,
    { ...base, epoch },
    `cluster.json: epoch must be an ISO 8601 date such as "2024-01-01T00:00:00Z" or whole milliseconds since 1970, not ${JSON.stringify(epoch)}`,
  ]),
  [
    'a layout without a shard field',
    { ...base, layout: 'sonyflake' },
    'cluster.json: layout must be a preset with a shard field (instagram), not "sonyflake"',
  ],
  [
    'an upper-case schema prefix',
    { ...base, schemaPrefix: 'Shard_' },
    'cluster.json: schemaPrefix must be lower-case letters, digits or _ (at most 41), starting with a letter or _',
  ],
  [
    'nextIdLanguage c',
    { ...base, nextIdLanguage: 'c' },
    'cluster.json: nextIdLanguage must be one of plpgsql, sql',
  ],
  [
    'no tables',
    { ...base, tables: {} },
    'cluster.json: tables must map at least one table name to its CREATE TABLE statement',
  ],
  [
    'a hostile table name',
    { ...base, tables: { 'x"; DROP': photos } },
    `cluster.json: tables["x\\"; DROP"] is not a good table name: it must be a plain SQL identifier in lower case (${IDENTIFIER}); names starting with _shardflake are reserved for shardflake`,
  ],
  [
    'a reserved table name',
    { ...base, tables: { _shardflake_x: 'CREATE TABLE _shardflake_x (id bigint PRIMARY KEY)' } },
    `cluster.json: tables._shardflake_x is not a good table name: it must be a plain SQL identifier in lower case (${IDENTIFIER}); names starting with _shardflake are reserved for shardflake`,
  ],
  [
    'an empty statement list',
    { ...base, tables: { photos: [] } },
    'cluster.json: tables.photos must be an SQL statement or a non-empty list of statements',
  ],
  [
    'a migration that is not an object',
    { ...base, migrations: ['ALTER TABLE photos ADD c int'] },
    'cluster.json: migrations[0] must be an object { version, name, sql }',
  ],
  [
    'a migration without sql',
    { ...base, migrations: [{ version: 1, name: 'c' }] },
    'cluster.json: migrations[0].sql is missing (The migration: one statement, or a list run in order in one transaction (CONCURRENTLY index builds: all of them or none))',
  ],
  [
    'a migration version 0',
    { ...base, migrations: [{ version: 0, sql: 'ALTER TABLE photos ADD c int' }] },
    'cluster.json: migrations[0].version must be a whole number from 1 (versions count up from 1 without gaps)',
  ],
  [
    'a reference table list',
    { ...base, referenceTables: ['plans'] },
    'cluster.json: referenceTables must map each reference table name to its CREATE TABLE statement',
  ],
  [
    'a lookup with an unknown field',
    { ...base, lookups: { caption: { table: 'photos', column: 'caption', uniq: true } } },
    'cluster.json: lookups.caption.uniq is not a known field (known: table, column, unique, normalize)',
  ],
  [
    'a lookup whose column is not an identifier',
    { ...base, lookups: { caption: { table: 'photos', column: 'cap tion' } } },
    `cluster.json: lookups.caption.column is not a plain SQL identifier (${IDENTIFIER})`,
  ],
  [
    'a lookup with unique "yes"',
    { ...base, lookups: { caption: { table: 'photos', column: 'caption', unique: 'yes' } } },
    'cluster.json: lookups.caption.unique must be true or false',
  ],
  [
    'an upper-case lookup name',
    { ...base, lookups: { Caption: { table: 'photos', column: 'caption' } } },
    'cluster.json: lookups.Caption is not a good lookup name: use lower-case letters, digits or _ (at most 40), starting with a letter or _',
  ],
  [
    'an adopt section without its source',
    { ...base, adopt: { root: 'photos', place: { photos: { column: 'id' } } } },
    'cluster.json: adopt.from is missing (The live database adopted into the cluster (a postgres:// URL; ${VAR} allowed))',
  ],
  [
    'an adopt placement of the wrong shape',
    { ...base, adopt: { from: 'postgres://x@h/db', root: 'photos', place: { photos: 'id' } } },
    'cluster.json: adopt.place.photos must be an object { "column": …, "parent": … }',
  ],
];

/**
 * Configs of a good shape whose meaning is wrong (a name that points nowhere, versions out of order, a statement
 * that leaves its schema): the JSON Schema cannot see these, the validator's second pass does.
 */
export const badMeanings: [what: string, config: unknown, code: string, message: string][] = [
  [
    'an adopt root that is not placed',
    { ...base, adopt: { from: 'postgres://x@h/db', root: 'users', place: { photos: { column: 'id' } } } },
    'INVALID_CONFIG',
    'cluster.json: adopt.place must place the root table users',
  ],
  [
    'an adopted table whose parent is not placed',
    {
      ...base,
      tables: { ...base.tables, users: 'CREATE TABLE users (id bigint PRIMARY KEY DEFAULT next_id())' },
      adopt: {
        from: 'postgres://x@h/db',
        root: 'users',
        place: { users: { column: 'id' }, photos: { column: 'user_id', parent: 'albums' } },
      },
    },
    'INVALID_CONFIG',
    'cluster.json: adopt.place.photos.parent must name another placed table',
  ],
  [
    'an adopt source named like a cluster server',
    {
      ...base,
      adopt: { from: 'postgres://x@h/db', server: 'a', root: 'photos', place: { photos: { column: 'id' } } },
    },
    'INVALID_CONFIG',
    'cluster.json: adopt.server a is also a server of the cluster; name the source another way',
  ],
  [
    'a catalog naming no server',
    { ...base, catalog: 'c' },
    'UNKNOWN_SERVER',
    'cluster.json: catalog names server "c", which servers does not define (servers: a, b)',
  ],
  [
    'a node listed twice',
    { ...base, servers: { a: [servers.a, servers.a] } },
    'INVALID_CONFIG',
    'cluster.json: servers.a lists node postgres://postgres:****@127.0.0.1:54001/app twice',
  ],
  [
    'a node under two servers',
    { ...base, servers: { a: servers.a, b: [servers.b, servers.a] } },
    'INVALID_CONFIG',
    'cluster.json: node postgres://postgres:****@127.0.0.1:54001/app is listed under both servers.a and servers.b',
  ],
  [
    'an epoch in the future',
    { ...base, epoch: '2999-01-01T00:00:00Z' },
    'INVALID_CONFIG',
    'cluster.json: epoch 2999-01-01T00:00:00.000Z is in the future; ids before it cannot be made',
  ],
  [
    'migrations out of order',
    { ...base, migrations: [{ version: 2, sql: 'ALTER TABLE photos ADD c int' }] },
    'INVALID_CONFIG',
    'cluster.json: migrations[0].version must be 1, not 2 (versions count up from 1 without gaps)',
  ],
  [
    'a table list creating another table',
    { ...base, tables: { photos: 'CREATE TABLE users (id bigint PRIMARY KEY)' } },
    'INVALID_CONFIG',
    'cluster.json: tables.photos must start with CREATE TABLE photos (it creates users)',
  ],
  [
    'a lookup on a table the config lacks',
    { ...base, lookups: { user_email: { table: 'users', column: 'email' } } },
    'INVALID_CONFIG',
    "cluster.json: lookups.user_email.table must name one of the config's tables (photos)",
  ],
  [
    'a lookup on id',
    { ...base, lookups: { by_id: { table: 'photos', column: 'id' } } },
    'INVALID_CONFIG',
    'cluster.json: lookups.by_id.column cannot be id (rows are found by id already)',
  ],
  [
    'two lookups on one column',
    {
      ...base,
      lookups: {
        caption: { table: 'photos', column: 'caption' },
        text: { table: 'photos', column: 'caption' },
      },
    },
    'INVALID_CONFIG',
    'cluster.json: lookups.text: photos.caption already has a lookup (lookups.caption)',
  ],
  [
    'a reference table named like a sharded one',
    { ...base, referenceTables: { photos: 'CREATE TABLE photos (id int PRIMARY KEY)' } },
    'INVALID_CONFIG',
    "cluster.json: referenceTables.photos: table photos is both a sharded table and a reference table; inside a shard session the shard's table would hide the reference table, so give one of them another name",
  ],
];
