import type { Command } from 'commander';

export function registerBenchSqlCommand(_bench: Command): void {}
