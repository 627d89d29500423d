/**
 * The names the fence (fence.ts) and its guard (fence-guard.ts) share: their own module, so neither file imports
 * the other back.
 */
export const FENCE_FUNCTION = '_shardflake_fence';
/** The role that owns sealed old copies: NOLOGIN, no members (checked at every seal). */
export const FENCED_ROLE = 'shardflake_fenced';
