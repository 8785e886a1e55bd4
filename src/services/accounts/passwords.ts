/**
 * Password hashing with argon2id at DESIGN §3's parameters (m = 19456 KiB, t = 2, p = 1).
 */
import argon2 from "argon2";

const OPTIONS = { type: argon2.argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;

/** A hash of a random password, verified against when the email is unknown so timing matches. */
let dummyHash: Promise<string> | undefined;

/** @returns the PHC-format argon2id hash of `password`. */
export function hashPassword(password: string): Promise<string> {
  return argon2.hash(password, OPTIONS);
}

/**
 * Checks `password` against `hash`; with `hash` null, spends the same time and returns false
 * (login answers alike for known and unknown emails).
 */
export async function verifyPassword(hash: string | null, password: string): Promise<boolean> {
  if (!hash) {
    dummyHash ??= argon2.hash("switchyard-timing-equaliser", OPTIONS);
    await argon2.verify(await dummyHash, password).catch(() => false);
    return false;
  }
  return argon2.verify(hash, password).catch(() => false);
}
