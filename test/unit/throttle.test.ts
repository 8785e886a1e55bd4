/** The per-address throttling key (issue 8, item 5): IPv4 as is, IPv6 by its /64. */
import { clientKey } from "../../src/services/platform/auth-throttle.js";

test("when the address is IPv4 (or IPv4-mapped IPv6), then the key is the IPv4 address", () => {
  expect(clientKey("203.0.113.7")).toBe("203.0.113.7");
  expect(clientKey("::ffff:203.0.113.7")).toBe("203.0.113.7");
  expect(clientKey("::FFFF:203.0.113.7")).toBe("203.0.113.7");
});

test("when the address is IPv6, then every address of one /64 shares a key, however it is written", () => {
  const key = clientKey("2001:db8:1:2:3:4:5:6");
  expect(key).toBe("2001:db8:1:2::/64");
  for (const same of ["2001:db8:1:2::9", "2001:0db8:0001:0002:ffff::1", "2001:DB8:1:2::", "2001:db8:1:2::1%eth0"]) {
    expect(clientKey(same)).toBe(key);
  }
  expect(clientKey("2001:db8:1:3::1")).not.toBe(key);
  expect(clientKey("2001:db8::1")).toBe("2001:db8:0:0::/64");
  expect(clientKey("::1")).toBe("0:0:0:0::/64");
  expect(clientKey("64:ff9b::192.0.2.1")).toBe("64:ff9b:0:0::/64");
});

test("when no address is known, then there is no key (the per-address counter is skipped)", () => {
  expect(clientKey(undefined)).toBeUndefined();
  expect(clientKey("")).toBeUndefined();
});
