import type { Command } from 'commander';

/** `cluster move` and `cluster rebalance`, registered under the `cluster` command by cluster.ts. */
export function registerMoveCommands(_cluster: Command): void {}
