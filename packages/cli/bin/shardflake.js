#!/usr/bin/env node
// The `shardflake` command. A committed file rather than dist/cli/main.js itself, so that `npm install` in a fresh
// clone links the command before `prepare` has built dist/ (npm skips a bin whose file does not exist yet).
import '../dist/cli/main.js';
