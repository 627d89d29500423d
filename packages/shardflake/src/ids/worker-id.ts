import { expectObject, expectString } from '../errors/arguments.js';
import { ShardflakeError } from '../errors/errors.js';

/**
 * LSID's default worker id: a 20-bit hash of the machine's MAC address (seed 002 says "BLAKE2s of the MAC
 * address" and leaves the rest open; these are our choices, documented in docs/ids.md):
 * - The MAC: from os.networkInterfaces(), skipping internal interfaces (loopback) and the all-zero MAC that
 *   virtual interfaces report; of those left, the interface whose name sorts first (then the smallest MAC), so
 *   the choice does not depend on the order the kernel lists interfaces in.
 * - The hash: BLAKE2s-256 (no key, no salt) of the MAC's 6 raw bytes (not its text).
 * - The bits: the first 20 bits of the digest, big-endian — byte 0, byte 1 and the high nibble of byte 2.
 * - No usable MAC (containers without a network, sandboxes): a random 20-bit worker id drawn once per process
 *   from the OS's CSPRNG. Ids stay unique in practice only as far as 2^20 random values do; pass an explicit
 *   worker (or lease one from the cluster catalog) wherever that matters.
 */
export const WORKER_BITS = 20;
export const WORKER_MAX = 2 ** WORKER_BITS - 1;

const MAC_TEXT = /^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$/i;

/** The network interface `findMac` chose, and its MAC address as text. */
export interface MacChoice {
  /** The interface's name as os.networkInterfaces() gives it, such as `eth0`. */
  interface: string;
  /** The interface's MAC address in lower case with colons, such as `02:42:ac:11:00:02`. */
  mac: string;
}

/**
 * What findMac reads: os.networkInterfaces()'s shape, written out here so that the published types of
 * `shardflake/ids` need no Node type definitions.
 */
export type NetworkInterfaces = Record<string, readonly { mac: string; internal: boolean }[] | undefined>;
type Interfaces = NetworkInterfaces;

/**
 * A Node built-in module, loaded when first asked for: `shardflake/ids` imports none (each costs its import, and
 * node:crypto ≈ 5 ms), so the functions that need one get it at their call.
 */
function builtin<ID extends 'node:os' | 'node:crypto'>(
  id: ID,
): ID extends 'node:os' ? typeof import('node:os') : typeof import('node:crypto') {
  return process.getBuiltinModule(id) as never;
}

/** The MAC address LSID hashes, or null when the machine has none that identifies it. */
export function findMac(interfaces: Interfaces = builtin('node:os').networkInterfaces()): MacChoice | null {
  expectObject(interfaces, 'findMac: the network interfaces');
  const candidates: MacChoice[] = [];
  for (const [name, addresses] of Object.entries(interfaces)) {
    // Entries of other shapes than os.networkInterfaces() gives are not MACs: skipped, like internal ones.
    if (!Array.isArray(addresses)) continue;
    for (const address of addresses) {
      if (typeof address !== 'object' || address === null || typeof address.mac !== 'string') continue;
      if (address.internal || !MAC_TEXT.test(address.mac)) continue;
      const mac = address.mac.toLowerCase().replaceAll('-', ':');
      if (mac === '00:00:00:00:00:00') continue;
      candidates.push({ interface: name, mac });
    }
  }
  candidates.sort((a, b) =>
    a.interface === b.interface ? (a.mac < b.mac ? -1 : 1) : a.interface < b.interface ? -1 : 1,
  );
  return candidates[0] ?? null;
}

/** The 6 bytes of a MAC written as `aa:bb:cc:dd:ee:ff` (or with hyphens). */
export function macBytes(mac: string): Uint8Array {
  expectString(mac, 'a MAC address');
  if (!MAC_TEXT.test(mac))
    throw new ShardflakeError('INVALID_ARGUMENT', `${JSON.stringify(mac)} is not a MAC address`);
  return Uint8Array.from(mac.split(/[:-]/), (byte) => Number.parseInt(byte, 16));
}

/** BLAKE2s-256 of the MAC's bytes; the worker id is the digest's first 20 bits. */
export function workerIdFromMac(mac: string): number {
  // Node's own BLAKE2s-256 (OpenSSL): the same digest as @noble/hashes' blake2s. node:crypto is loaded here, on
  // first use, because importing it costs ≈ 5 ms that `shardflake/ids` would pay before making any id.
  const { createHash } = builtin('node:crypto');
  const digest = createHash('blake2s256').update(macBytes(mac)).digest();
  // byte 0 → worker bits 19..12, byte 1 → bits 11..4, high nibble of byte 2 → bits 3..0
  return ((digest[0] as number) << 12) | ((digest[1] as number) << 4) | ((digest[2] as number) >> 4);
}

export interface WorkerIdSource {
  worker: number;
  source: 'mac' | 'random';
  mac?: MacChoice;
}

let processWorker: WorkerIdSource | undefined;

/** A uniform 20-bit worker id from the CSPRNG (the low 20 bits of 32 random bits: 2^32 is a multiple of 2^20). */
function randomWorker(): number {
  return (globalThis.crypto.getRandomValues(new Uint32Array(1))[0] as number) & WORKER_MAX;
}

/** The default worker id of this process: from the MAC when there is one, else random (drawn once). */
export function defaultWorkerId(): WorkerIdSource {
  if (!processWorker) {
    const mac = findMac();
    processWorker = mac
      ? { worker: workerIdFromMac(mac.mac), source: 'mac', mac }
      : { worker: randomWorker(), source: 'random' };
  }
  return processWorker;
}
