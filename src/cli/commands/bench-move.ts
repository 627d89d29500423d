import type { Command } from 'commander';

export function registerBenchMoveCommand(_bench: Command): void {}
