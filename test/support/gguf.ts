/**
 * A GGUF copy with one more metadata entry (issue 17: a test model with a `tokenizer.chat_template`),
 * written without external tools. GGUF (v2/v3): magic `GGUF`, version u32, tensor count u64,
 * metadata count u64, the metadata (key: u64 length + bytes; type u32; value), the tensor infos
 * (name, dims, type, offset relative to the data section), padding to `general.alignment` (32 by
 * default), then the tensor data. Adding an entry shifts the infos; the data section keeps its
 * relative offsets, so only the padding before it is recomputed.
 */
import { readFileSync, writeFileSync } from "node:fs";

const STRING = 8;
const ARRAY = 9;
/** Byte sizes of the fixed-size value types, by type id. */
const FIXED: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

/** Copies GGUF `source` to `target` with the string entry `key` = `value` appended to its metadata. */
export function writeGgufWithString(source: string, target: string, key: string, value: string): void {
  const buf = readFileSync(source);
  if (buf.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${source} is not a GGUF file`);
  const version = buf.readUInt32LE(4);
  if (version < 2) throw new Error(`GGUF version ${version} is not supported here`);
  const tensorCount = Number(buf.readBigUInt64LE(8));
  const kvCount = Number(buf.readBigUInt64LE(16));
  let pos = 24;
  const readString = () => {
    const len = Number(buf.readBigUInt64LE(pos));
    const s = buf.toString("utf8", pos + 8, pos + 8 + len);
    pos += 8 + len;
    return s;
  };
  const skipValue = (type: number): void => {
    if (type === STRING) {
      readString();
    } else if (type === ARRAY) {
      const elemType = buf.readUInt32LE(pos);
      const count = Number(buf.readBigUInt64LE(pos + 4));
      pos += 12;
      for (let i = 0; i < count; i++) skipValue(elemType);
    } else if (FIXED[type] !== undefined) {
      pos += FIXED[type];
    } else {
      throw new Error(`unknown GGUF value type ${type}`);
    }
  };
  let alignment = 32;
  for (let i = 0; i < kvCount; i++) {
    const k = readString();
    const type = buf.readUInt32LE(pos);
    pos += 4;
    if (k === key) throw new Error(`${source} already has ${key}`);
    if (k === "general.alignment" && type === 4) alignment = buf.readUInt32LE(pos);
    skipValue(type);
  }
  const kvEnd = pos;
  for (let i = 0; i < tensorCount; i++) {
    readString();
    const dims = buf.readUInt32LE(pos);
    pos += 4 + 8 * dims + 4 + 8;
  }
  const infoEnd = pos;
  const dataStart = Math.ceil(infoEnd / alignment) * alignment;

  const keyBytes = Buffer.from(key, "utf8");
  const valueBytes = Buffer.from(value, "utf8");
  const entry = Buffer.alloc(8 + keyBytes.length + 4 + 8 + valueBytes.length);
  let o = entry.writeBigUInt64LE(BigInt(keyBytes.length), 0);
  o += keyBytes.copy(entry, o);
  o = entry.writeUInt32LE(STRING, o);
  o = entry.writeBigUInt64LE(BigInt(valueBytes.length), o);
  valueBytes.copy(entry, o);

  const header = Buffer.from(buf.subarray(0, 24));
  header.writeBigUInt64LE(BigInt(kvCount + 1), 16);
  const head = Buffer.concat([header, buf.subarray(24, kvEnd), entry, buf.subarray(kvEnd, infoEnd)]);
  const padding = Buffer.alloc((alignment - (head.length % alignment)) % alignment);
  writeFileSync(target, Buffer.concat([head, padding, buf.subarray(dataStart)]));
}
