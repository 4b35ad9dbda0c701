/** What a post is and how its readers are decided: posts live above relations and read them. */
export const VISIBILITIES = ["PUBLIC", "FOLLOWERS", "SELF"] as const;
export type Visibility = (typeof VISIBILITIES)[number];

/**
 * How canRead decides a FOLLOWERS post (table 30-2):
 *  TRUTH           always the relation table;
 *  PROJECTION_ONLY always the projection (the negative control of the new-enemy problem);
 *  CONTENT_TOKEN   the projection if its watermark has reached the post's acl_token, else the truth;
 *  FRESH_TOKEN     the projection if its watermark has reached the sequence as of now, else the truth.
 */
export const READ_MODES = ["TRUTH", "PROJECTION_ONLY", "CONTENT_TOKEN", "FRESH_TOKEN"] as const;
export type ReadMode = (typeof READ_MODES)[number];

export type DecisionSource = "truth" | "projection" | "fallback-truth" | "public-block-check" | "author";

export interface ReadDecision {
  allowed: boolean;
  source: DecisionSource;
}
