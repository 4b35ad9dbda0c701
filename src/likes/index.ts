export { LikeService, ITEM_NOT_FOUND } from "./like-service.ts";
export { LikeConsumer, type ConsumeStats } from "./like-consumer.ts";
export { LikeRebuild, UnknownItemsError, type RebuildReport, type ItemDrift } from "./like-rebuild.ts";
export { listLikers, listLikedItems, type LikerPage, type LikedItemPage } from "./like-reads.ts";
export {
  readCount,
  writeSide,
  readSide,
  writeSideClean,
  readSideClean,
  READ_COUNT_SQL,
  WRITE_SIDE_SQL,
  READ_SIDE_SQL,
} from "./like-audit.ts";
export type { LikeResult, LikeEvent, LikeCountReading, Outcome } from "./types.ts";
