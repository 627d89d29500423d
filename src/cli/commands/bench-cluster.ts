import type { Command } from 'commander';

export function registerBenchClusterCommand(_bench: Command): void {}
