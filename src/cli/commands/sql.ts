import type { Command } from 'commander';

export function registerSqlCommands(_program: Command): void {}
