import type { Command } from 'commander';

export function registerIdCommands(_program: Command): void {}
