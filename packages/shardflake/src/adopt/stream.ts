import type pg from 'pg';
import { recordApplied } from '../catalog/adopt.js';
import type { Queryable } from '../postgres/connect.js';
import { Applier } from './apply.js';
import type { AdoptModel } from './model.js';
import { parseLsn } from './pgoutput.js';
import { advanceSlot, checkSlotBound, peekTransactions } from './slot.js';
import type { Targets } from './targets.js';

/**
 * The change stream: read whole transactions from the slot (slot.ts), apply them as one batch on every server
 * (apply.ts), then confirm them on the slot. `step` does one round; `catchUp` steps until the slot has nothing
 * more; `drain(lsn)` applies exactly what committed before `lsn` (the cutover's pinned moments).
 */
export interface StreamProgress {
  changes: number;
  behindBytes: bigint;
  heldBytes: bigint;
  appliedLsn: string;
}

export class Stream {
  readonly applier: Applier;
  appliedLsn: string;
  private lastRecorded = 0;

  constructor(
    readonly model: AdoptModel,
    readonly targets: Targets,
    private readonly source: pg.Client,
    private readonly catalog: Queryable,
    clients: ReadonlyMap<string, pg.Client>,
    private readonly names: { slot: string; publication: string },
    appliedLsn: string,
    private readonly batchChanges: number,
    private readonly onProgress?: (p: StreamProgress) => void,
  ) {
    this.applier = new Applier(model, targets, clients, names.slot);
    this.appliedLsn = appliedLsn;
  }

  /**
   * One round: at most about `batchChanges` changes. Returns how many transactions it read and whether it reached
   * the end of what the slot had (a round that read less than a full batch): under steady writes the slot is never
   * empty, so "caught up" means one round took everything there was.
   */
  async step(uptoLsn?: string): Promise<{ read: number; atEnd: boolean }> {
    const state = await checkSlotBound(this.source, this.names.slot, this.model.adopt.maxSlotWalBytes);
    const transactions = await peekTransactions(
      this.source,
      this.names.slot,
      this.names.publication,
      this.batchChanges,
      uptoLsn,
    );
    const applied = parseLsn(this.appliedLsn);
    // A kill between a batch's commit and the slot's advance leaves it in the slot: its relations still count.
    for (const t of transactions) if (t.endLsn <= applied) this.applier.learn(t);
    const fresh = transactions.filter((t) => t.endLsn > applied);
    if (fresh.length > 0) this.appliedLsn = await this.applier.apply(fresh);
    if (transactions.length > 0) await advanceSlot(this.source, this.names.slot, this.appliedLsn);
    const behind = fresh.length > 0 ? state.behindBytes : 0n;
    if (fresh.length > 0 || performance.now() - this.lastRecorded > 1000) {
      this.lastRecorded = performance.now();
      await recordApplied(this.catalog, this.appliedLsn, behind);
    }
    this.onProgress?.({
      changes: this.applier.changes,
      behindBytes: behind,
      heldBytes: state.heldBytes,
      appliedLsn: this.appliedLsn,
    });
    const changes = transactions.reduce((n, t) => n + t.messages.length, 0);
    return { read: transactions.length, atEnd: changes < this.batchChanges };
  }

  /** Steps until a round took everything the slot had. */
  async catchUp(): Promise<void> {
    while (!(await this.step()).atEnd) {}
  }

  /** Applies every transaction that committed before `lsn`, and nothing after it. */
  async drain(lsn: string): Promise<void> {
    while ((await this.step(lsn)).read > 0) {}
  }
}
