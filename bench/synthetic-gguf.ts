/**
 * A synthetic GGUF model for benches that need a model bigger than the tiny test file and no
 * download (issue 31, Checks: memory with a ~100 MB model). It copies the tokenizer (and
 * `general.*`) key/value pairs of a llama-architecture GGUF byte for byte, writes new `llama.*`
 * hyperparameters, and fills every tensor with random weights: F16 matrices, F32 norm vectors.
 * The result loads in node-llama-cpp and generates (garbage text): what a bench measures with it is
 * memory and speed, never quality.
 *
 * The file format (GGUF v3, little-endian), as llama.cpp's `gguf.cpp` reads it:
 * `"GGUF"`, version u32, tensor count u64, key/value count u64; each pair a string key (u64
 * length + bytes), a value type u32 and the value (arrays: element type u32, count u64, elements);
 * each tensor's info: name, dimension count u32, dimensions u64 each (innermost first), ggml type
 * u32, offset u64 from the start of the data; the data starts at the next multiple of the
 * alignment (`general.alignment`, default 32) and every tensor's offset is a multiple of it.
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";

/** The shape of the synthetic model: a llama with `layers` blocks of width `dim`. */
export interface SyntheticLlamaShape {
  dim: number;
  layers: number;
  heads: number;
  kvHeads: number;
  feedForward: number;
  contextLength: number;
}

/** dim 768, 8 layers, 12 heads (4 for K/V), feed-forward 2048: about 100 MB at F16 with a 512-token vocabulary. */
export const LLAMA_100MB: SyntheticLlamaShape = {
  dim: 768,
  layers: 8,
  heads: 12,
  kvHeads: 4,
  feedForward: 2048,
  contextLength: 2048,
};

const ALIGNMENT = 32;
const GGML_F32 = 0;
const GGML_F16 = 1;
/** GGUF value types. */
const T = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
};
const FIXED_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

/** A key/value pair as raw bytes (key, type and value), and its key. */
interface RawPair {
  key: string;
  bytes: Buffer;
}

/** Reads the key/value pairs of a GGUF file (v2 or v3) as raw byte ranges. @throws on a file that is not GGUF. */
export function readGgufPairs(file: string): RawPair[] {
  const buf = readFileSync(file);
  if (buf.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${file} is not a GGUF file`);
  const version = buf.readUInt32LE(4);
  if (version < 2) throw new Error(`${file}: GGUF version ${version} is not supported`);
  const pairCount = Number(buf.readBigUInt64LE(16));
  let at = 24;
  const string = () => {
    const n = Number(buf.readBigUInt64LE(at));
    at += 8 + n;
    return buf.toString("utf8", at - n, at);
  };
  const skipValue = (type: number) => {
    if (type === T.string) string();
    else if (type === T.array) {
      const elementType = buf.readUInt32LE(at);
      const count = Number(buf.readBigUInt64LE(at + 4));
      at += 12;
      for (let i = 0; i < count; i++) skipValue(elementType);
    } else if (FIXED_SIZE[type] !== undefined) at += FIXED_SIZE[type];
    else throw new Error(`${file}: unknown GGUF value type ${type}`);
  };
  const pairs: RawPair[] = [];
  for (let i = 0; i < pairCount; i++) {
    const start = at;
    const key = string();
    const type = buf.readUInt32LE(at);
    at += 4;
    skipValue(type);
    pairs.push({ key, bytes: Buffer.from(buf.subarray(start, at)) });
  }
  return pairs;
}

function ggufString(s: string): Buffer {
  const bytes = Buffer.from(s, "utf8");
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(bytes.length));
  return Buffer.concat([len, bytes]);
}

function pair(key: string, type: number, value: number | string): RawPair {
  let v: Buffer;
  if (type === T.string) v = ggufString(value as string);
  else {
    v = Buffer.alloc(4);
    if (type === T.u32) v.writeUInt32LE(value as number);
    else if (type === T.f32) v.writeFloatLE(value as number);
    else throw new Error(`type ${type} not written here`);
  }
  const t = Buffer.alloc(4);
  t.writeUInt32LE(type);
  return { key, bytes: Buffer.concat([ggufString(key), t, v]) };
}

interface TensorSpec {
  name: string;
  /** Innermost first, as GGUF stores them. */
  dims: number[];
  type: typeof GGML_F32 | typeof GGML_F16;
}

function tensorBytes(t: TensorSpec): number {
  return t.dims.reduce((a, b) => a * b, 1) * (t.type === GGML_F16 ? 2 : 4);
}

function llamaTensors(shape: SyntheticLlamaShape, vocab: number): TensorSpec[] {
  const { dim, feedForward: ff } = shape;
  const kvDim = (dim / shape.heads) * shape.kvHeads;
  const tensors: TensorSpec[] = [
    { name: "token_embd.weight", dims: [dim, vocab], type: GGML_F16 },
    { name: "output_norm.weight", dims: [dim], type: GGML_F32 },
    { name: "output.weight", dims: [dim, vocab], type: GGML_F16 },
  ];
  for (let l = 0; l < shape.layers; l++) {
    const b = `blk.${l}.`;
    tensors.push(
      { name: `${b}attn_norm.weight`, dims: [dim], type: GGML_F32 },
      { name: `${b}attn_q.weight`, dims: [dim, dim], type: GGML_F16 },
      { name: `${b}attn_k.weight`, dims: [dim, kvDim], type: GGML_F16 },
      { name: `${b}attn_v.weight`, dims: [dim, kvDim], type: GGML_F16 },
      { name: `${b}attn_output.weight`, dims: [dim, dim], type: GGML_F16 },
      { name: `${b}ffn_norm.weight`, dims: [dim], type: GGML_F32 },
      { name: `${b}ffn_gate.weight`, dims: [dim, ff], type: GGML_F16 },
      { name: `${b}ffn_down.weight`, dims: [ff, dim], type: GGML_F16 },
      { name: `${b}ffn_up.weight`, dims: [dim, ff], type: GGML_F16 },
    );
  }
  return tensors;
}

/** xorshift32: fast, seeded, good enough for weights nobody reads. */
function random(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
}

/** Fills `t`'s bytes: F32 norms are 1.0; F16 weights are ±(2^-10 … 2^-5) with a random mantissa. */
function fillTensor(t: TensorSpec, out: Buffer, next: () => number): void {
  if (t.type === GGML_F32) {
    for (let i = 0; i < out.length; i += 4) out.writeFloatLE(1, i);
    return;
  }
  const halves = new Uint16Array(out.buffer, out.byteOffset, out.length / 2);
  for (let i = 0; i < halves.length; i++) {
    const r = next();
    const exponent = 5 + (r % 6); // biased exponent 5..10: 2^-10 … 2^-5
    halves[i] = ((r >>> 31) << 15) | (exponent << 10) | ((r >>> 8) & 0x3ff);
  }
}

/**
 * Writes a llama GGUF of `shape` to `out`, with `tokenizerFrom`'s `tokenizer.*` pairs (its
 * vocabulary size sets the embedding tables'). Returns the file's size in bytes.
 * @throws when `tokenizerFrom` is not a GGUF with a `tokenizer.ggml.tokens` array.
 */
export function writeSyntheticLlama(
  out: string,
  tokenizerFrom: string,
  shape: SyntheticLlamaShape = LLAMA_100MB,
  seed = 31,
): number {
  const source = readGgufPairs(tokenizerFrom);
  const tokens = source.find((p) => p.key === "tokenizer.ggml.tokens");
  if (!tokens) throw new Error(`${tokenizerFrom} has no tokenizer.ggml.tokens`);
  // The array's count: after the key (8 + length), the value type (4) and the element type (4).
  const vocab = Number(tokens.bytes.readBigUInt64LE(8 + Buffer.byteLength(tokens.key) + 8));
  const pairs: RawPair[] = [
    pair("general.architecture", T.string, "llama"),
    pair("general.name", T.string, `switchyard-bench-llama-${shape.dim}x${shape.layers}`),
    pair("general.alignment", T.u32, ALIGNMENT),
    pair("llama.context_length", T.u32, shape.contextLength),
    pair("llama.embedding_length", T.u32, shape.dim),
    pair("llama.feed_forward_length", T.u32, shape.feedForward),
    pair("llama.block_count", T.u32, shape.layers),
    pair("llama.attention.head_count", T.u32, shape.heads),
    pair("llama.attention.head_count_kv", T.u32, shape.kvHeads),
    pair("llama.attention.layer_norm_rms_epsilon", T.f32, 1e-5),
    pair("llama.rope.dimension_count", T.u32, shape.dim / shape.heads),
    ...source.filter((p) => p.key.startsWith("tokenizer.")),
  ];
  const tensors = llamaTensors(shape, vocab);
  const header = Buffer.alloc(24);
  header.write("GGUF", 0, "latin1");
  header.writeUInt32LE(3, 4);
  header.writeBigUInt64LE(BigInt(tensors.length), 8);
  header.writeBigUInt64LE(BigInt(pairs.length), 16);
  const infos: Buffer[] = [];
  const offsets: number[] = [];
  let offset = 0;
  for (const t of tensors) {
    offsets.push(offset);
    const info = Buffer.alloc(4 + 8 * t.dims.length + 4 + 8);
    info.writeUInt32LE(t.dims.length, 0);
    t.dims.forEach((d, i) => info.writeBigUInt64LE(BigInt(d), 4 + 8 * i));
    info.writeUInt32LE(t.type, 4 + 8 * t.dims.length);
    info.writeBigUInt64LE(BigInt(offset), 8 + 8 * t.dims.length);
    infos.push(ggufString(t.name), info);
    offset += Math.ceil(tensorBytes(t) / ALIGNMENT) * ALIGNMENT;
  }
  const head = Buffer.concat([header, ...pairs.map((p) => p.bytes), ...infos]);
  const fd = openSync(out, "w");
  try {
    writeSync(fd, head);
    writeSync(fd, Buffer.alloc((ALIGNMENT - (head.length % ALIGNMENT)) % ALIGNMENT));
    const next = random(seed);
    let written = 0;
    for (const [i, t] of tensors.entries()) {
      if (offsets[i] > written) writeSync(fd, Buffer.alloc(offsets[i] - written));
      const data = Buffer.alloc(tensorBytes(t));
      fillTensor(t, data, next);
      writeSync(fd, data);
      written = offsets[i] + data.length;
    }
    if (offset > written) writeSync(fd, Buffer.alloc(offset - written));
    return Math.ceil(head.length / ALIGNMENT) * ALIGNMENT + offset;
  } finally {
    closeSync(fd);
  }
}
