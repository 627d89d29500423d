import type { Command } from 'commander';

export function registerClusterCommands(_program: Command): void {}
