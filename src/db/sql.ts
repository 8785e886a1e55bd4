/** Thin helpers for the raw SQL the services run through TypeORM managers. */

/** Anything that runs SQL: a DataSource, an EntityManager or a QueryRunner. */
export interface Queryable {
  query(text: string, params?: unknown[]): Promise<unknown>;
}

/**
 * Runs `text` and returns its rows. TypeORM answers UPDATE and DELETE with `[rows, rowCount]`;
 * this always gives the rows.
 */
export async function queryRows<T>(db: Queryable, text: string, params?: unknown[]): Promise<T[]> {
  const raw = await db.query(text, params);
  if (Array.isArray(raw) && raw.length === 2 && Array.isArray(raw[0]) && typeof raw[1] === "number") {
    return raw[0] as T[];
  }
  return raw as T[];
}
