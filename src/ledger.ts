import type { Pool } from "./db/pool.ts";
import { readPartitions } from "./db/ledger-config.ts";
import { Hooks } from "./hooks.ts";
import { COMMENT_COUNTER } from "./content/comment-spec.ts";
import { CommentService } from "./content/comments.ts";
import { CounterConsumer } from "./counters/counter-consumer.ts";
import { CONSUMER_BATCH } from "./counters/partition-batch.ts";
import { CounterRebuild, UnknownCounterKeysError } from "./counters/counter-rebuild.ts";
import { LikeConsumer } from "./likes/like-consumer.ts";
import { LikeRebuild } from "./likes/like-rebuild.ts";
import { LikeService } from "./likes/like-service.ts";
import { PostService } from "./content/posts.ts";
import { ErasureService } from "./erasure/erasure-service.ts";
import { RelationProjector } from "./relations/projector.ts";
import { RelationService } from "./relations/relation-service.ts";
import { NotificationFeed } from "./notifications/notification-consumer.ts";
import { NotificationRebuild } from "./notifications/notification-rebuild.ts";
import { FeedConsumers } from "./feed/feed-consumer.ts";
import { FeedRebuild } from "./feed/feed-rebuild.ts";
import { FeedAbsence } from "./feed/feed-absence.ts";
import { PartitionWorker, type PartitionWorkerOptions } from "./workers/partition-worker.ts";
import type { PacingOptions } from "./workers/pacer.ts";

/** Every service of the library over one pool: what the HTTP API, the CLI and the workers share. */
export interface Ledger {
  pool: Pool;
  partitions: number;
  hooks: Hooks;
  likes: LikeService;
  likeConsumer: LikeConsumer;
  likeRebuild: LikeRebuild;
  relations: RelationService;
  projector: RelationProjector;
  posts: PostService;
  comments: CommentService;
  commentConsumer: CounterConsumer;
  commentRebuild: CounterRebuild;
  notifications: NotificationFeed;
  notificationRebuild: NotificationRebuild;
  feed: FeedConsumers;
  feedRebuild: FeedRebuild;
  /** The read side of absent readers: a returning reader's inbox is installed before its page. */
  feedAbsence: FeedAbsence;
  erasure: ErasureService;
}

export async function openLedger(
  pool: Pool,
  options: {
    hooks?: Hooks;
    erasureBatchSize?: number;
    writeBatchMax?: number;
    pacing?: PacingOptions;
    /** LEDGER_FEED_MAX_ITEMS: the most posts one home timeline inbox keeps. */
    feedMaxItems?: number;
    /** LEDGER_FEED_HOT_FOLLOWERS: the follower count from which an author's posts are merged at read time. */
    feedHotFollowers?: number;
    /** LEDGER_FEED_ABSENT_MS: fan-out skips readers who have not read for this long. */
    feedAbsentMs?: number;
    /** LEDGER_FEED_RETURN_REBUILD_MS: the bound of a returning reader's inbox install. */
    feedReturnRebuildMs?: number;
  } = {},
): Promise<Ledger> {
  const hooks = options.hooks ?? new Hooks();
  const pacing = options.pacing === undefined ? {} : { pacing: options.pacing };
  return {
    pool,
    partitions: await readPartitions(pool),
    hooks,
    likes: await LikeService.open(pool, {
      ...(options.writeBatchMax === undefined ? {} : { batchMax: options.writeBatchMax }),
    }),
    likeConsumer: new LikeConsumer(pool, { hooks }),
    likeRebuild: new LikeRebuild(pool, { hooks, ...pacing }),
    relations: await RelationService.open(
      pool,
      options.writeBatchMax === undefined ? {} : { batchMax: options.writeBatchMax },
    ),
    projector: new RelationProjector(pool, { hooks }),
    posts: await PostService.open(pool, { hooks }),
    comments: await CommentService.open(pool, { hooks }),
    commentConsumer: new CounterConsumer(pool, COMMENT_COUNTER, { hooks }),
    commentRebuild: new CounterRebuild(pool, COMMENT_COUNTER, {
      hooks,
      ...pacing,
      unknownKeys: (keys) => new UnknownCounterKeysError(keys, "POST_NOT_FOUND", "post"),
    }),
    notifications: new NotificationFeed(pool, { hooks }),
    notificationRebuild: new NotificationRebuild(pool, { hooks, ...pacing }),
    feed: new FeedConsumers(pool, {
      hooks,
      ...(options.feedMaxItems === undefined ? {} : { maxItems: options.feedMaxItems }),
      ...(options.feedHotFollowers === undefined ? {} : { hotFollowers: options.feedHotFollowers }),
      ...(options.feedAbsentMs === undefined ? {} : { absentMs: options.feedAbsentMs }),
    }),
    feedRebuild: new FeedRebuild(pool, {
      hooks,
      ...pacing,
      ...(options.feedMaxItems === undefined ? {} : { maxItems: options.feedMaxItems }),
    }),
    feedAbsence: new FeedAbsence(pool, {
      hooks,
      ...(options.feedMaxItems === undefined ? {} : { maxItems: options.feedMaxItems }),
      ...(options.feedAbsentMs === undefined ? {} : { absentMs: options.feedAbsentMs }),
      ...(options.feedReturnRebuildMs === undefined ? {} : { rebuildMs: options.feedReturnRebuildMs }),
    }),
    erasure: await ErasureService.open(pool, {
      hooks,
      ...pacing,
      ...(options.erasureBatchSize === undefined ? {} : { batchSize: options.erasureBatchSize }),
    }),
  };
}

export interface WorkerEvents {
  onLikes?: (stats: { applied: number; covered: number; dup: number }) => void;
  onRelations?: (verdicts: { applied: number; stale: number; dup: number }) => void;
  onComments?: (stats: { applied: number; covered: number; dup: number }) => void;
  onNotifications?: (stats: { applied: number; skipped: number; dup: number }) => void;
  onFeed?: (stats: { applied: number; dup: number; rows: number }) => void;
}

export interface WorkerOptions extends PartitionWorkerOptions, WorkerEvents {
  /** Partitions to serve; all by default. */
  partitions?: readonly number[];
  batchSize?: number;
  /**
   * Loops per consumer kind; the partitions are dealt round-robin over them, so partitions
   * proceed in parallel (they share no rows). Default: min(partitions, 4).
   */
  loops?: number;
}

/**
 * A consumer loop's pass of fewer events than this per partition it serves is followed by its idle
 * wait (PartitionWorker's idleBelow): the loops gather a trickle into batches instead of spinning on
 * it; a pass of more goes straight on, so a backlog drains at full speed. Per partition, because each
 * partition's batch is a transaction of its own: a loop over four partitions that went on after 100
 * events paid four transactions for them (docs/write-path.md, "What the loops cost the writers").
 */
export const CONSUMER_IDLE_BELOW = 100;

/** The consumer loops (like counter, follower projector, comment counter, notifications, home timeline) over the given partitions. */
export function createWorkers(ledger: Ledger, options: WorkerOptions = {}): PartitionWorker[] {
  const parts = options.partitions ?? Array.from({ length: ledger.partitions }, (_, p) => p);
  const batchSize = options.batchSize ?? CONSUMER_BATCH;
  const loops = Math.max(1, Math.min(parts.length, options.loops ?? 4));
  const groups = Array.from({ length: loops }, (_, g) => parts.filter((_, i) => i % loops === g));
  return groups.flatMap((group, g) => {
    const loopOptions: PartitionWorkerOptions = {
      ...options,
      idleBelow: options.idleBelow ?? CONSUMER_IDLE_BELOW * group.length,
    };
    /** A loop of one view: its pass, what it reports, and how many events the pass handled (for the idle rule). */
    const loop = <S>(
      kind: string,
      poll: (signal: AbortSignal) => Promise<S>,
      handled: (stats: S) => number,
      report: ((stats: S) => void) | undefined,
    ) =>
      new PartitionWorker(
        `${kind}#${g}`,
        async (signal) => {
          const stats = await poll(signal);
          report?.(stats);
          return handled(stats);
        },
        loopOptions,
      );
    return [
      loop(
        "like-counter",
        (signal) => ledger.likeConsumer.pollOnce(group, batchSize, signal),
        (s) => s.applied + s.covered + s.dup,
        options.onLikes,
      ),
      loop(
        "follower-projector",
        (signal) => ledger.projector.pollOnce(group, batchSize, signal),
        (v) => v.applied + v.stale + v.dup,
        options.onRelations,
      ),
      loop(
        "comment-counter",
        (signal) => ledger.commentConsumer.pollOnce(group, batchSize, signal),
        (s) => s.applied + s.covered + s.dup,
        options.onComments,
      ),
      loop(
        "notifications",
        (signal) => ledger.notifications.pollOnce(group, batchSize, signal),
        (s) => s.applied + s.skipped + s.dup,
        options.onNotifications,
      ),
      loop(
        "feed",
        (signal) => ledger.feed.pollOnce(group, batchSize, signal),
        (s) => s.applied + s.dup,
        options.onFeed,
      ),
    ];
  });
}
