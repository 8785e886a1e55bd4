/**
 * Which IP addresses a webhook may connect to (DESIGN §3 Webhooks, SSRF): private, loopback,
 * link-local, metadata, shared (CGNAT), multicast, reserved and documentation ranges are refused,
 * also when they hide inside IPv6 forms (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
 * NAT64 `64:ff9b::/96`, 6to4 `2002::/16`). Pure functions; `webhook-client.ts` applies them to the
 * address it actually connects to.
 */
import { isIP } from "node:net";

/** One refused range: a name for logs and attempt records. */
export interface AddressVerdict {
  /** True when the address is a public unicast address a webhook may reach. */
  allowed: boolean;
  /** Why it was refused (e.g. `loopback`, `private (RFC 1918)`), or `public`. */
  reason: string;
}

type V4Range = [base: number, prefix: number, reason: string];

const V4_RANGES: V4Range[] = [
  [v4("0.0.0.0"), 8, "this network (0/8)"],
  [v4("10.0.0.0"), 8, "private (RFC 1918)"],
  [v4("100.64.0.0"), 10, "shared address space (100.64/10)"],
  [v4("127.0.0.0"), 8, "loopback"],
  [v4("169.254.0.0"), 16, "link-local / metadata"],
  [v4("172.16.0.0"), 12, "private (RFC 1918)"],
  [v4("192.0.0.0"), 24, "IETF protocol assignments"],
  [v4("192.0.2.0"), 24, "documentation"],
  [v4("192.88.99.0"), 24, "6to4 relay anycast"],
  [v4("192.168.0.0"), 16, "private (RFC 1918)"],
  [v4("198.18.0.0"), 15, "benchmarking"],
  [v4("198.51.100.0"), 24, "documentation"],
  [v4("203.0.113.0"), 24, "documentation"],
  [v4("224.0.0.0"), 4, "multicast"],
  [v4("240.0.0.0"), 4, "reserved"],
];

/** Parses dotted-quad IPv4 to an unsigned 32-bit number (callers pass only valid IPv4). */
function v4(address: string): number {
  return address.split(".").reduce((n, part) => n * 256 + Number(part), 0);
}

function classifyV4(n: number): AddressVerdict {
  for (const [base, prefix, reason] of V4_RANGES) {
    const size = 2 ** (32 - prefix);
    if (n >= base && n < base + size) return { allowed: false, reason };
  }
  return { allowed: true, reason: "public" };
}

/** Parses an IPv6 address (with `::` and an optional dotted IPv4 tail) to eight 16-bit groups. */
function v6Groups(address: string): number[] {
  let text = address.toLowerCase();
  const zone = text.indexOf("%");
  if (zone >= 0) text = text.slice(0, zone);
  const lastColon = text.lastIndexOf(":");
  if (text.slice(lastColon + 1).includes(".")) {
    // A dotted IPv4 tail (`::ffff:127.0.0.1`) becomes its two hex groups.
    const n = v4(text.slice(lastColon + 1));
    text = `${text.slice(0, lastColon + 1)}${Math.floor(n / 65536).toString(16)}:${(n % 65536).toString(16)}`;
  }
  const [head, rest] = text.includes("::") ? text.split("::") : [text, undefined];
  const parse = (s: string) => (s === "" ? [] : s.split(":").map((g) => parseInt(g, 16)));
  const left = parse(head);
  const right = rest === undefined ? [] : parse(rest);
  const missing = 8 - left.length - right.length;
  return rest === undefined ? left : [...left, ...Array<number>(Math.max(0, missing)).fill(0), ...right];
}

function classifyV6(groups: number[]): AddressVerdict {
  const [g0, g1, g2, g3, g4, g5, g6, g7] = groups;
  const embeddedV4 = (hi: number, lo: number) => hi * 65536 + lo;
  const zeroUpTo = (n: number) => groups.slice(0, n).every((g) => g === 0);
  if (zeroUpTo(8)) return { allowed: false, reason: "unspecified (::)" };
  if (zeroUpTo(7) && g7 === 1) return { allowed: false, reason: "loopback" };
  if (zeroUpTo(5) && g5 === 0xffff) {
    const inner = classifyV4(embeddedV4(g6, g7));
    return inner.allowed ? inner : { allowed: false, reason: `IPv4-mapped ${inner.reason}` };
  }
  if (zeroUpTo(6)) {
    const inner = classifyV4(embeddedV4(g6, g7));
    return inner.allowed ? inner : { allowed: false, reason: `IPv4-compatible ${inner.reason}` };
  }
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0) {
    const inner = classifyV4(embeddedV4(g6, g7));
    return inner.allowed ? inner : { allowed: false, reason: `NAT64 ${inner.reason}` };
  }
  if (g0 === 0x64 && g1 === 0xff9b && g2 === 1) return { allowed: false, reason: "NAT64 local-use (64:ff9b:1::/48)" };
  if (g0 === 0x2002) {
    const inner = classifyV4(embeddedV4(g1, g2));
    return inner.allowed ? inner : { allowed: false, reason: `6to4 ${inner.reason}` };
  }
  if (g0 === 0x2001 && g1 === 0) return { allowed: false, reason: "Teredo (2001::/32)" };
  if (g0 === 0x2001 && g1 === 0xdb8) return { allowed: false, reason: "documentation" };
  if (g0 === 0x0100 && g1 === 0 && g2 === 0 && g3 === 0) return { allowed: false, reason: "discard (100::/64)" };
  if ((g0 & 0xfe00) === 0xfc00) return { allowed: false, reason: "unique local (fc00::/7)" };
  if ((g0 & 0xffc0) === 0xfe80) return { allowed: false, reason: "link-local (fe80::/10)" };
  if ((g0 & 0xffc0) === 0xfec0) return { allowed: false, reason: "site-local (fec0::/10)" };
  if ((g0 & 0xff00) === 0xff00) return { allowed: false, reason: "multicast" };
  // Beyond the forms above, only global unicast is public: this also refuses ::ffff:0:0/96
  // (IPv4-translated) and every range IANA has not allocated for the Internet.
  if ((g0 & 0xe000) !== 0x2000) return { allowed: false, reason: "not global unicast (outside 2000::/3)" };
  if (g0 === 0x2001 && g1 < 0x200) return { allowed: false, reason: "IETF protocol assignments (2001::/23)" };
  if (g0 === 0x3fff && g1 < 0x1000) return { allowed: false, reason: "documentation (3fff::/20)" };
  return { allowed: true, reason: "public" };
}

/**
 * Classifies one IP address literal (IPv4 dotted quad or IPv6, brackets and zone ids tolerated).
 * Anything that is not an IP literal is refused (`not an IP address`).
 */
export function classifyAddress(address: string): AddressVerdict {
  const bare = address.startsWith("[") && address.endsWith("]") ? address.slice(1, -1) : address;
  const family = isIP(bare.split("%")[0]);
  if (family === 4) return classifyV4(v4(bare));
  if (family === 6) return classifyV6(v6Groups(bare));
  return { allowed: false, reason: "not an IP address" };
}
