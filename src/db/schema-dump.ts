import type { Pool, PoolClient } from "./pool.ts";

/**
 * The schema of a migrated database as one text, read from the catalogs (the embedded
 * PostgreSQL 16 ships no pg_dump, and a pg_dump of another major version refuses the server):
 * src/db/schema.sql is this text for a fresh database after every migration, and its drift
 * test compares the two. Everything in the schema `public` the migrations make: types,
 * sequences, tables with their columns, constraints, indexes, triggers and policies, views,
 * and every function by its current definition (pg_get_functiondef). Sorted by name in the
 * "C" collation; no OIDs, owners, privileges, statistics or timestamps, so the same
 * migrations give the same text on any cluster. It documents the present schema; it is not
 * meant to be replayed (the sections are not in dependency order).
 */

const SCHEMA = "public";

/** Objects that belong to an extension are the extension's, not ours. */
const NOT_FROM_EXTENSION = (catalog: string, oid: string) =>
  `NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = '${catalog}'::regclass AND d.objid = ${oid} AND d.deptype = 'e')`;

export const SCHEMA_HEADER = `-- The current schema: what src/db/migrations make of an empty database, generated from its
-- catalogs by \`npm run db:schema\` (src/db/schema-dump.ts). Do not edit it: write a new
-- migration and regenerate; test/db/schema-file.test.ts fails while the two differ.
-- Sorted by name; owners, privileges and the rows initLedger adds are not part of it.
-- Documentation of the present, not a script to replay (sections are not in dependency order).
`;

/** The `text` column of each row; $1 is the schema's name where the query needs it. */
async function lines(client: PoolClient, sql: string, params: unknown[] = [SCHEMA]): Promise<string[]> {
  const { rows } = await client.query<{ text: string }>(sql, params);
  return rows.map((r) => r.text);
}

async function extensions(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    SELECT format('CREATE EXTENSION IF NOT EXISTS %I WITH SCHEMA %I;', e.extname, n.nspname) AS text
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname <> 'plpgsql'
     ORDER BY e.extname COLLATE "C"`,
    [],
  );
}

async function types(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    SELECT CASE t.typtype
             WHEN 'e' THEN format('CREATE TYPE %I AS ENUM (%s);', t.typname,
               (SELECT string_agg(quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid))
             WHEN 'd' THEN format('CREATE DOMAIN %I AS %s%s%s%s;', t.typname, format_type(t.typbasetype, t.typtypmod),
               CASE WHEN t.typdefault IS NOT NULL THEN ' DEFAULT ' || t.typdefault ELSE '' END,
               CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END,
               coalesce((SELECT string_agg(format(E'\\n  CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)), '' ORDER BY c.conname COLLATE "C")
                           FROM pg_constraint c WHERE c.contypid = t.oid), ''))
             ELSE format(E'CREATE TYPE %I AS (\\n%s\\n);', t.typname,
               (SELECT string_agg(format('  %I %s', a.attname, format_type(a.atttypid, a.atttypmod)), E',\\n' ORDER BY a.attnum)
                  FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped))
           END AS text
      FROM pg_type t
     WHERE t.typnamespace = $1::regnamespace
       AND (t.typtype IN ('e', 'd') OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))
       AND ${NOT_FROM_EXTENSION("pg_type", "t.oid")}
     ORDER BY t.typname COLLATE "C"`,
  );
}

/** Sequences of their own or of a serial column; an identity column's sequence is part of its column. */
async function sequences(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    SELECT format('CREATE SEQUENCE %I AS %s INCREMENT BY %s MINVALUE %s MAXVALUE %s START WITH %s CACHE %s%s%s;',
             c.relname, format_type(s.seqtypid, NULL), s.seqincrement, s.seqmin, s.seqmax, s.seqstart, s.seqcache,
             CASE WHEN s.seqcycle THEN ' CYCLE' ELSE ' NO CYCLE' END,
             coalesce((SELECT format(' OWNED BY %I.%I', t.relname, a.attname)
                         FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid
                         JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'a'), '')) AS text
      FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
     WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'S'
       AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('i', 'e'))
     ORDER BY c.relname COLLATE "C"`,
  );
}

/**
 * One block per table: CREATE TABLE with its columns and constraints, then its indexes (those
 * no constraint made), triggers, row security and policies, and comments.
 */
async function tables(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    WITH tbl AS (
      SELECT c.oid, c.relname, c.relkind, c.relpersistence, c.relispartition, c.relrowsecurity, c.relforcerowsecurity, c.reloptions
        FROM pg_class c
       WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p')
         AND ${NOT_FROM_EXTENSION("pg_class", "c.oid")}
    ),
    col AS (
      SELECT a.attrelid, a.attnum,
             format('  %I %s', a.attname, format_type(a.atttypid, a.atttypmod))
             || CASE WHEN a.attcollation <> 0 AND a.attcollation <> (SELECT typcollation FROM pg_type WHERE oid = a.atttypid)
                     THEN format(' COLLATE %I', (SELECT collname FROM pg_collation WHERE oid = a.attcollation)) ELSE '' END
             || CASE WHEN a.attgenerated = 's' THEN format(' GENERATED ALWAYS AS (%s) STORED', pg_get_expr(ad.adbin, ad.adrelid))
                     WHEN ad.adbin IS NOT NULL THEN ' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid) ELSE '' END
             || CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY' WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
             || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END AS text
        FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
       WHERE a.attrelid IN (SELECT oid FROM tbl) AND a.attnum > 0 AND NOT a.attisdropped AND a.attislocal
    ),
    con AS (
      SELECT c.conrelid, c.conname, format('  CONSTRAINT %I %s', c.conname, pg_get_constraintdef(c.oid)) AS text
        FROM pg_constraint c
       WHERE c.conrelid IN (SELECT oid FROM tbl) AND c.conislocal AND c.contype IN ('p', 'u', 'c', 'f', 'x')
    ),
    extra AS (
      SELECT i.indrelid AS relid, 1 AS kind, ic.relname::text AS name, pg_get_indexdef(i.indexrelid) || ';' AS text
        FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
       WHERE i.indrelid IN (SELECT oid FROM tbl)
         AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))
         AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)
      UNION ALL
      SELECT g.tgrelid, 2, g.tgname::text, pg_get_triggerdef(g.oid, true) || ';'
             || CASE g.tgenabled WHEN 'D' THEN format(E'\\nALTER TABLE %I DISABLE TRIGGER %I;', (SELECT relname FROM tbl WHERE oid = g.tgrelid), g.tgname)
                                 WHEN 'R' THEN format(E'\\nALTER TABLE %I ENABLE REPLICA TRIGGER %I;', (SELECT relname FROM tbl WHERE oid = g.tgrelid), g.tgname)
                                 WHEN 'A' THEN format(E'\\nALTER TABLE %I ENABLE ALWAYS TRIGGER %I;', (SELECT relname FROM tbl WHERE oid = g.tgrelid), g.tgname)
                                 ELSE '' END
        FROM pg_trigger g
       WHERE g.tgrelid IN (SELECT oid FROM tbl) AND NOT g.tgisinternal AND g.tgparentid = 0
      UNION ALL
      SELECT t.oid, 3, '', format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY;', t.relname)
             || CASE WHEN t.relforcerowsecurity THEN format(E'\\nALTER TABLE %I FORCE ROW LEVEL SECURITY;', t.relname) ELSE '' END
        FROM tbl t WHERE t.relrowsecurity
      UNION ALL
      SELECT p.polrelid, 4, p.polname::text,
             format('CREATE POLICY %I ON %I AS %s FOR %s TO %s%s%s;', p.polname, (SELECT relname FROM tbl WHERE oid = p.polrelid),
               CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
               CASE p.polcmd WHEN 'r' THEN 'SELECT' WHEN 'a' THEN 'INSERT' WHEN 'w' THEN 'UPDATE' WHEN 'd' THEN 'DELETE' ELSE 'ALL' END,
               CASE WHEN p.polroles = '{0}' THEN 'PUBLIC'
                    ELSE (SELECT string_agg(quote_ident(r.rolname), ', ' ORDER BY r.rolname COLLATE "C") FROM pg_roles r WHERE r.oid = ANY (p.polroles)) END,
               CASE WHEN p.polqual IS NOT NULL THEN format(' USING (%s)', pg_get_expr(p.polqual, p.polrelid)) ELSE '' END,
               CASE WHEN p.polwithcheck IS NOT NULL THEN format(' WITH CHECK (%s)', pg_get_expr(p.polwithcheck, p.polrelid)) ELSE '' END)
        FROM pg_policy p WHERE p.polrelid IN (SELECT oid FROM tbl)
      UNION ALL
      SELECT s.stxrelid, 5, s.stxname::text, pg_get_statisticsobjdef(s.oid) || ';'
        FROM pg_statistic_ext s WHERE s.stxrelid IN (SELECT oid FROM tbl)
      UNION ALL
      SELECT t.oid, 6, '', format('COMMENT ON TABLE %I IS %L;', t.relname, d.description)
        FROM tbl t JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = t.oid AND d.objsubid = 0
      UNION ALL
      SELECT t.oid, 7, lpad(a.attnum::text, 5, '0'), format('COMMENT ON COLUMN %I.%I IS %L;', t.relname, a.attname, d.description)
        FROM tbl t JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = t.oid AND d.objsubid > 0
        JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.objsubid
    )
    SELECT format('CREATE %sTABLE %I', CASE t.relpersistence WHEN 'u' THEN 'UNLOGGED ' ELSE '' END, t.relname)
           || CASE WHEN t.relispartition
                   THEN format(' PARTITION OF %I %s', (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent WHERE h.inhrelid = t.oid),
                               pg_get_expr((SELECT relpartbound FROM pg_class WHERE oid = t.oid), t.oid))
                   ELSE '' END
           || E' (\\n'
           || coalesce((SELECT string_agg(text, E',\\n' ORDER BY kind, ord, name) FROM (
                  SELECT 1 AS kind, attnum AS ord, '' AS name, text FROM col WHERE attrelid = t.oid
                  UNION ALL
                  SELECT 2, 0, conname COLLATE "C", text FROM con WHERE conrelid = t.oid) parts), '')
           || E'\\n)'
           || CASE WHEN t.relkind = 'p' THEN ' PARTITION BY ' || pg_get_partkeydef(t.oid) ELSE '' END
           || CASE WHEN t.reloptions IS NOT NULL THEN format(' WITH (%s)', array_to_string(t.reloptions, ', ')) ELSE '' END
           || ';'
           || coalesce((SELECT string_agg(E'\\n' || text, '' ORDER BY kind, name COLLATE "C") FROM extra WHERE relid = t.oid), '') AS text
      FROM tbl t
     ORDER BY t.relname COLLATE "C"`,
  );
}

async function views(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    SELECT format(E'CREATE %sVIEW %I AS\\n%s', CASE c.relkind WHEN 'm' THEN 'MATERIALIZED ' ELSE '' END, c.relname,
                  rtrim(pg_get_viewdef(c.oid, true), E'; \\n') || ';')
           || coalesce((SELECT string_agg(E'\\n' || pg_get_indexdef(i.indexrelid) || ';', '' ORDER BY ic.relname COLLATE "C")
                          FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid WHERE i.indrelid = c.oid), '')
           || coalesce((SELECT string_agg(E'\\n' || pg_get_triggerdef(g.oid, true) || ';', '' ORDER BY g.tgname COLLATE "C")
                          FROM pg_trigger g WHERE g.tgrelid = c.oid AND NOT g.tgisinternal), '')
           || coalesce((SELECT format(E'\\nCOMMENT ON VIEW %I IS %L;', c.relname, d.description)
                          FROM pg_description d WHERE d.classoid = 'pg_class'::regclass AND d.objoid = c.oid AND d.objsubid = 0), '') AS text
      FROM pg_class c
     WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')
       AND ${NOT_FROM_EXTENSION("pg_class", "c.oid")}
     ORDER BY c.relname COLLATE "C"`,
  );
}

/** Functions and procedures, by name then argument types; aggregates have no pg_get_functiondef. */
async function functions(client: PoolClient): Promise<string[]> {
  return lines(
    client,
    `
    SELECT CASE WHEN p.prokind = 'a'
                THEN format('-- aggregate %I(%s)', p.proname, pg_get_function_identity_arguments(p.oid))
                ELSE rtrim(pg_get_functiondef(p.oid), E'\\n') || ';' END
           || coalesce((SELECT format(E'\\nCOMMENT ON %s %I(%s) IS %L;', CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END,
                                      p.proname, pg_get_function_identity_arguments(p.oid), d.description)
                          FROM pg_description d WHERE d.classoid = 'pg_proc'::regclass AND d.objoid = p.oid AND d.objsubid = 0), '') AS text
      FROM pg_proc p
     WHERE p.pronamespace = $1::regnamespace
       AND ${NOT_FROM_EXTENSION("pg_proc", "p.oid")}
     ORDER BY p.proname COLLATE "C", pg_get_function_identity_arguments(p.oid) COLLATE "C"`,
  );
}

/**
 * The schema text of the database `pool` connects to (see the module comment), read in one
 * snapshot with a fixed search_path: pg_get_viewdef and pg_get_indexdef qualify names by it.
 */
export async function dumpSchema(pool: Pool): Promise<string> {
  const client = await pool.connect();
  try {
    await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
    await client.query("SET LOCAL search_path TO public");
    const sections: [string, string[]][] = [
      ["Extensions", await extensions(client)],
      ["Types", await types(client)],
      ["Sequences", await sequences(client)],
      ["Tables, with their constraints, indexes, triggers and policies", await tables(client)],
      ["Views", await views(client)],
      ["Functions and procedures", await functions(client)],
    ];
    await client.query("COMMIT");
    const body = sections
      .filter(([, items]) => items.length > 0)
      .map(([title, items]) => `-- ${title}\n\n${items.join("\n\n")}\n`)
      .join("\n");
    client.release();
    return `${SCHEMA_HEADER}\n${body}`;
  } catch (err) {
    client.release(true); // discarded: it may be inside the failed transaction
    throw err;
  }
}

/** The command that rewrites src/db/schema.sql. */
export const SCHEMA_COMMAND = "npm run db:schema";

/**
 * Why `committed` (the text of src/db/schema.sql) is not `actual` (dumpSchema of a freshly
 * migrated database), with the first line that differs; undefined when they are the same.
 */
export function schemaDrift(committed: string, actual: string): string | undefined {
  if (committed === actual) return undefined;
  const a = committed.split("\n");
  const b = actual.split("\n");
  let line = 0;
  while (line < a.length && line < b.length && a[line] === b[line]) line++;
  const show = (text: string | undefined) => (text === undefined ? "(end of text)" : JSON.stringify(text));
  return (
    `src/db/schema.sql is not the schema the migrations make: first difference at line ${line + 1}, ` +
    `the file has ${show(a[line])}, the migrations make ${show(b[line])}. ` +
    `Run \`${SCHEMA_COMMAND}\` and commit src/db/schema.sql (never edit it by hand).`
  );
}
