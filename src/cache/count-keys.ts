/**
 * Every Redis key of the count layer, in one place (docs/cache.md, "Key encoding").
 *
 * Ids may contain `:` (src/ids.ts), so a key must never be built as "<counter key> + suffix":
 * under the first encoding the log of target X was `sl:cnt:<kind>:X:log`, which is also the
 * counter of target `X:log`. Here the role of a key is the segment right after the version
 * (`cnt`, `bkt`, `log`, `feed`, `reconciled`) and the kind, a fixed name without `:`, comes next,
 * so two keys are equal only when role, kind and target (and bucket) are equal, whatever
 * characters a target holds: a counter can never be another target's log. A bucket's number is
 * the digits after the last `#`, so it cannot be confused with a target either.
 *
 * The version segment (`v2`) is the upgrade: keys of the first encoding (`sl:cnt:...`,
 * `sl:feed:...`, `sl:reconciled:...`) are never read again. The layer is a cache, so a Redis
 * that still holds them simply starts empty under the new names, and counters are backfilled
 * from the facts on their first read.
 */
const V = "sl:v2";

export const COUNT_KEY_PREFIX = `${V}:`;

/** One node: the counter's hash (base, w<part>, b<i>, at). */
export const counterKey = (kind: string, target: string) => `${V}:cnt:${kind}:${target}`;

/** One node: the counter's log of applied increments (`<part>:<seq>` -> delta). */
export const counterLogKey = (kind: string, target: string) => `${V}:log:${kind}:${target}`;

/** Cluster: the base of a counter (base, w<part>, at), its own hash tag. */
export const clusterBaseKey = (kind: string, target: string) => `${V}:cnt:{${kind}:${target}}`;

/** Cluster: bucket i of a counter (d, w<part>), a hash tag of its own, shared only with its log. */
export const clusterBucketKey = (kind: string, target: string, bucket: number) =>
  `${V}:bkt:{${kind}:${target}#${bucket}}`;

/** Cluster: bucket i's log, in the bucket's slot. */
export const clusterBucketLogKey = (kind: string, target: string, bucket: number) =>
  `${V}:log:{${kind}:${target}#${bucket}}`;

/** The feeder's cursor per partition: every event <= it has been through the hot path. */
export const cursorKey = (kind: string) => `${V}:feed:${kind}`;

/** The boundary of the last completed reconciliation per partition. */
export const reconciledKey = (kind: string) => `${V}:reconciled:${kind}`;

/** Per kind, the database timeline its counters and cursor were fed from (docs/failover.md). */
export const timelineKey = () => `${V}:timeline`;

/** SCAN patterns of every key of one kind but its feeder's cursor: counters, buckets, logs, the reconciled boundary. */
export const kindKeyPatterns = (kind: string) => [
  `${V}:cnt:${kind}:*`,
  `${V}:log:${kind}:*`,
  `${V}:cnt:{${kind}:*`,
  `${V}:bkt:{${kind}:*`,
  `${V}:log:{${kind}:*`,
  reconciledKey(kind),
];
