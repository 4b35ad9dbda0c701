/**
 * SQL that holds when the account in `column` and the viewer (`param`, a text parameter; NULL for
 * nobody, a request without a token) are in no block either way. Every list of accounts the API
 * serves leaves such accounts out, as the profile and the relationship of the two answer 404
 * (docs/api.md, "What a blocked user learns"). Two index probes per row (block's primary key and
 * block_by_blocked); with a NULL viewer neither matches. It sits in the list's own statement,
 * before its LIMIT, so a keyset page is still full whenever enough rows are left.
 * `column` and `param` are always literals in our code.
 */
export function notBlockedEitherWay(column: string, param: string): string {
  return `NOT EXISTS (SELECT 1 FROM block vb WHERE vb.blocker = ${column} AND vb.blocked = ${param}::text)
        AND NOT EXISTS (SELECT 1 FROM block vb WHERE vb.blocker = ${param}::text AND vb.blocked = ${column})`;
}
