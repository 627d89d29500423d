import type { ClusterConfig } from '../cluster/config.js';
import type { AppWorkloadResult } from './app.js';

/** Placeholder until the example application lands: no workload. */
export async function runExampleWorkload(_config: ClusterConfig): Promise<AppWorkloadResult> {
  return { requests: 0, perSecond: 0, p50Ms: 0, p99Ms: 0 };
}
