/**
 * The directory of the library package that is published as `shardflake` (the one `npm pack` packs). The one place
 * that says where it is: after the package split it is `packages/shardflake`.
 */
export const PUBLISHED_PACKAGE_DIR = 'packages/shardflake';
