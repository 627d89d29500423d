import type { Command } from 'commander';

export function registerBenchInsertsCommand(_bench: Command): void {}
