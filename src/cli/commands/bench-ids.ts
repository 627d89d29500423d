import type { Command } from 'commander';

export function registerBenchIdsCommand(_bench: Command): void {}
