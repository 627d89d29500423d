/**
 * SQL boolean: whether pg_namespace row `n`'s owner is the running role or one it belongs to. pg_has_role says yes
 * to a superuser for every role, so a superuser trusts only schemas of superusers (who could do anything anyway).
 * For every schema shardflake shares between its objects rather than owning outright (the catalog, the move's
 * guard, the generator's shared slow path): a schema someone else owns could hold their objects.
 */
export const TRUSTED_OWNER = `(pg_has_role(current_user, n.nspowner, 'USAGE')
  AND (n.nspowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
       OR NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       OR (SELECT rolsuper FROM pg_roles WHERE oid = n.nspowner)))`;
