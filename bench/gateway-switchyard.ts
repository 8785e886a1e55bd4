/**
 * Switchyard as `bench/gateway.bench.ts` runs it: `src/main.js` as `npm start` runs it, plus one
 * bench-only switch (nothing of it is in `src`): SIGUSR2 turns metering off and on. While off,
 * `MeteringService.record` resolves at once with no charge and writes nothing (no activity row,
 * no ledger entry, no database round trip); auth, the credit check, the upstream call and the
 * answer are unchanged. This gives the issue 12 item 2 figure "with metering and ledger on, ≥ 0.7
 * of the same path with metering off" from one process, one database and one API key. Each switch
 * prints `{"bench_metering": "on"|"off"}`.
 *
 *   node dist-bench/bench/gateway-switchyard.js
 */
import { MeteringService } from "../src/services/metering/metering.service.js";

let meteringOn = true;
const record = MeteringService.prototype.record;
MeteringService.prototype.record = function benchRecord(this: MeteringService, ...args: Parameters<typeof record>) {
  return meteringOn ? record.apply(this, args) : Promise.resolve({ chargedMicros: 0n, balanceAfterMicros: null });
};
process.on("SIGUSR2", () => {
  meteringOn = !meteringOn;
  console.log(JSON.stringify({ bench_metering: meteringOn ? "on" : "off" }));
});

await import("../src/main.js");
