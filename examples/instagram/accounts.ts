import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import { Kysely, PostgresDialect } from 'kysely';
import { isShardflakeError, type Router, type ShardflakeId, sessionPool } from 'shardflake';
import type { ShardDB } from './schema.js';

/**
 * Sign-up and login by email, through the `account_email` lookup (schema.ts LOOKUPS: unique across the cluster).
 *
 * A user's account row lives in the user's shard, written in the same session as the user row, so the two commit
 * together with the email's lookup entry (which lives in the shard of the email's hash, maybe on another server).
 * Login never knows the user's shard: `router.lookup` finds the account by email (one read of the entry's shard,
 * one of the account's, which checks it and returns it).
 */
const scryptAsync = promisify(scrypt) as (password: string, salt: Buffer, length: number) => Promise<Buffer>;

export class EmailTakenError extends Error {
  constructor() {
    super('this email already has an account');
  }
}

/** Emails are compared by their text: normalised once, here, so Ann@X and ann@x are one account. */
export function normaliseEmail(email: string): string {
  return email.trim().toLowerCase();
}

async function hashPassword(password: string, salt = randomBytes(16)): Promise<string> {
  const key = await scryptAsync(password, salt, 32);
  return `${salt.toString('hex')}:${key.toString('hex')}`;
}

async function passwordMatches(password: string, stored: string): Promise<boolean> {
  const [salt = '', key = ''] = stored.split(':');
  const expected = Buffer.from(key, 'hex');
  const actual = await scryptAsync(password, Buffer.from(salt, 'hex'), expected.length);
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

export class Accounts {
  constructor(private readonly router: Router) {}

  /** A new user and their account, on the shard of their name; EmailTakenError when the email has an account. */
  async signUp(name: string, email: string, password: string): Promise<ShardflakeId> {
    const hash = await hashPassword(password);
    try {
      return await this.router.withShard({ key: name }, async (session) => {
        const db = new Kysely<ShardDB>({ dialect: new PostgresDialect({ pool: sessionPool(session) }) });
        const user = await db.insertInto('users').values({ name }).returning('id').executeTakeFirstOrThrow();
        await db
          .insertInto('accounts')
          .values({ user_id: user.id, email: normaliseEmail(email), password_hash: hash })
          .execute();
        return user.id;
      });
    } catch (error) {
      if (isShardflakeError(error, 'UNIQUE_VIOLATION')) throw new EmailTakenError();
      throw error;
    }
  }

  /** The user id of the account with this email and password, or null (no such email, or a wrong password). */
  async login(email: string, password: string): Promise<ShardflakeId | null> {
    // `fetch: true`: the lookup's check of the owner row returns the row (two reads in all).
    const hit = await this.router.lookup('account_email', normaliseEmail(email), { fetch: true });
    if (!hit || !(await passwordMatches(password, hit.row.password_hash as string))) return null;
    return hit.row.user_id as ShardflakeId;
  }
}
