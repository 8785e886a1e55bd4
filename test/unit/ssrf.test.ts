/**
 * The webhook address policy (DESIGN §3 Webhooks, SSRF): every refused range in each of its
 * written forms, and public addresses let through; plus the retry schedule's arithmetic.
 */
import { classifyAddress } from "../../src/services/events/webhooks/address-policy.js";
import { jittered, retryDelay } from "../../src/services/events/webhooks/webhook-dispatcher.js";
import { parseRetryAfter } from "../../src/services/events/webhooks/webhook-client.js";
import { isSigningSecret, signWebhook, webhookTarget } from "../../src/services/events/webhooks/webhook-target.js";

describe("classifyAddress", () => {
  test.each([
    ["0.0.0.0", "0/8"],
    ["0.1.2.3", "0/8"],
    ["10.0.0.1", "RFC 1918"],
    ["10.255.255.255", "RFC 1918"],
    ["172.16.0.1", "RFC 1918"],
    ["172.31.255.254", "RFC 1918"],
    ["192.168.1.1", "RFC 1918"],
    ["100.64.0.1", "100.64/10"],
    ["100.127.255.255", "100.64/10"],
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["169.254.169.254", "metadata"],
    ["169.254.0.1", "link-local"],
    ["224.0.0.1", "multicast"],
    ["255.255.255.255", "reserved"],
    ["::1", "loopback"],
    ["[::1]", "loopback"],
    ["0:0:0:0:0:0:0:1", "loopback"],
    ["::", "unspecified"],
    ["fc00::1", "fc00::/7"],
    ["fd12:3456::1", "fc00::/7"],
    ["fe80::1", "fe80::/10"],
    ["fe80::1%eth0", "fe80::/10"],
    ["febf::1", "fe80::/10"],
    ["ff02::1", "multicast"],
    ["::ffff:127.0.0.1", "IPv4-mapped loopback"],
    ["::ffff:7f00:1", "IPv4-mapped loopback"],
    ["::ffff:10.1.2.3", "IPv4-mapped private"],
    ["::ffff:169.254.169.254", "IPv4-mapped link-local"],
    ["0:0:0:0:0:ffff:c0a8:0101", "IPv4-mapped private"],
    ["::127.0.0.1", "IPv4-compatible loopback"],
    ["64:ff9b::127.0.0.1", "NAT64 loopback"],
    ["64:ff9b::a00:1", "NAT64 private"],
    ["64:ff9b::a9fe:a9fe", "NAT64 link-local"],
    ["64:ff9b:1::1", "NAT64 local-use"],
    ["2002:7f00:1::", "6to4 loopback"],
    ["2002:c0a8:0101::1", "6to4 private"],
    ["2002:a9fe:a9fe::", "6to4 link-local"],
    ["2001:db8::1", "documentation"],
    ["2001:0:4136:e378::1", "Teredo"],
  ])("when the address is %s, then it is refused (%s)", (address, why) => {
    const verdict = classifyAddress(address);
    expect(verdict.allowed).toBe(false);
    for (const word of why.split(" ")) expect(verdict.reason.toLowerCase()).toContain(word.toLowerCase().slice(0, 5));
  });

  test.each([
    "8.8.8.8",
    "1.1.1.1",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "169.253.255.255",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
  ])("when the address is the public %s, then it is allowed", (address) => {
    expect(classifyAddress(address)).toEqual({ allowed: true, reason: "public" });
  });

  test.each([
    "::ffff:0:7f00:1",
    "::ffff:0:a9fe:a9fe",
    "2001:2::1",
    "2001:10::1",
    "2001:20::1",
    "3fff::1",
    "5f00::1",
    "4000::1",
  ])("when the IPv6 address %s is outside the Internet's global unicast, then it is refused", (address) => {
    expect(classifyAddress(address).allowed).toBe(false);
  });

  test.each(["localhost", "example.com", "", "999.1.1.1", "1.2.3"])(
    "when %p is not an IP literal, then it is refused",
    (address) => {
      expect(classifyAddress(address).allowed).toBe(false);
    },
  );
});

describe("retry schedule", () => {
  test("when jitter is applied, then a delay stays within ±20 % of the schedule's", () => {
    expect(jittered(1000, () => 0)).toBe(800);
    expect(jittered(1000, () => 0.5)).toBe(1000);
    expect(jittered(1000, () => 0.999999)).toBe(1200);
    for (let i = 0; i < 200; i++) {
      const d = retryDelay([5000, 300000, 1800000], 2, null);
      expect(d).toBeGreaterThanOrEqual(240000);
      expect(d).toBeLessThanOrEqual(360000);
    }
  });

  test("when a 429/503 asks for Retry-After, then the retry waits for it, but never past the schedule's longest delay", () => {
    const schedule = [5000, 300000, 1800000];
    expect(retryDelay(schedule, 1, 60_000)).toBe(60_000);
    expect(retryDelay(schedule, 1, 10 * 3600_000)).toBe(1800000);
    // A shorter Retry-After than the schedule does not bring the retry forward.
    expect(retryDelay(schedule, 2, 1000)).toBeGreaterThanOrEqual(240000);
  });

  test("when Retry-After is delay-seconds or an HTTP date, then it reads as ms", () => {
    expect(parseRetryAfter("120")).toBe(120_000);
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(parseRetryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now)).toBe(30_000);
    expect(parseRetryAfter("soon")).toBeNull();
    expect(parseRetryAfter(undefined)).toBeNull();
  });
});

describe("webhook keys and signatures", () => {
  test("when metadata names http(s) URLs, then they are usable; other values are not", () => {
    expect(webhookTarget({ completion_webhook: "https://example.com/h", webhook_token: "t" })).toEqual({
      url: "https://example.com/h",
      token: "t",
    });
    expect(webhookTarget({ completion_webhook: "http://example.com" })).toEqual({
      url: "http://example.com/",
      token: null,
    });
    for (const bad of [
      "ftp://example.com",
      "javascript:alert(1)",
      "//example.com",
      "http://u:p@example.com",
      7,
      null,
    ]) {
      expect(webhookTarget({ completion_webhook: bad })).toBeNull();
    }
    expect(webhookTarget({ completion_webhook: `https://example.com/${"a".repeat(3000)}` })).toBeNull();
    expect(webhookTarget(null)).toBeNull();
  });

  test("when a delivery is signed, then it matches the Standard Webhooks reference vector", () => {
    // From the Standard Webhooks reference libraries' test suite.
    const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const body = '{"test": 2432232314}';
    expect(signWebhook(secret, id, 1614265330, body)).toBe("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    expect(isSigningSecret(secret)).toBe(true);
    expect(isSigningSecret("whsec_short")).toBe(false);
  });
});
