/**
 * Secrets kept in the database (a custom model's hub token, issue 9): AES-256-GCM with a key
 * derived by HKDF-SHA256 from the service's signing secret (config `jwtSecret`) and a purpose
 * label, so the token key is not the JWT key and each purpose gets a key of its own. A sealed
 * value is bound to its row (`context`, as GCM additional data): a ciphertext copied to another
 * row does not open. Layout: version byte (1), 12-byte IV, 16-byte tag, ciphertext.
 *
 * Rotating `SWITCHYARD_JWT_SECRET` makes the sealed values unreadable (they are only ever reported
 * as present, so nothing the API answers changes).
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/** Seals and opens short secrets with a key of its own purpose. */
export class SecretBox {
  private readonly key: Buffer;

  /**
   * @param secret the service's secret (≥ 32 characters).
   * @param purpose a label naming what the key protects, e.g. `model-hub-token`.
   */
  constructor(secret: string, purpose: string) {
    this.key = Buffer.from(hkdfSync("sha256", secret, "switchyard/secret-box/v1", purpose, 32));
  }

  /** Encrypts `plaintext` for the row named by `context`. */
  seal(plaintext: string, context: string): Buffer {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv);
    cipher.setAAD(Buffer.from(context, "utf8"));
    const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return Buffer.concat([Buffer.from([VERSION]), iv, cipher.getAuthTag(), body]);
  }

  /**
   * Decrypts what `seal` made for the same `context`.
   * @throws Error when the value was altered, made for another context or with another key.
   */
  open(sealed: Buffer, context: string): string {
    if (sealed.length < 1 + IV_BYTES + TAG_BYTES || sealed[0] !== VERSION) throw new Error("not a sealed secret");
    const iv = sealed.subarray(1, 1 + IV_BYTES);
    const tag = sealed.subarray(1 + IV_BYTES, 1 + IV_BYTES + TAG_BYTES);
    const decipher = createDecipheriv("aes-256-gcm", this.key, iv);
    decipher.setAAD(Buffer.from(context, "utf8"));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(sealed.subarray(1 + IV_BYTES + TAG_BYTES)), decipher.final()]).toString(
      "utf8",
    );
  }
}
