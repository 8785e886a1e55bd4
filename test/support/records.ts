/**
 * Factories for tests that drive metering directly: the `Principal` of a test caller, and a
 * `UsageRecord` (a finished chat completion by default; micro-USD costs, token counts) that
 * takes any field as an override.
 */
import { v7 as uuidv7 } from "uuid";
import type { Principal } from "../../src/services/platform/context.js";
import type { UsageRecord } from "../../src/services/metering/metering.service.js";
import { CHAT_MODEL, type createTestCaller } from "./harness.js";

type Caller = Awaited<ReturnType<typeof createTestCaller>>;

/** The caller as the services see it: an owner using its test key. */
export function principalOf(caller: Caller): Principal {
  return {
    userId: caller.userId,
    teamId: caller.teamId,
    role: "owner",
    email: caller.email,
    apiKey: { id: caller.keyId, name: "test key", prefix: caller.keyPrefix },
  };
}

/** A completed, free chat completion of 10 prompt and 20 completion tokens, with `overrides` applied. */
export function usageRecordFor(principal: Principal, overrides: Partial<UsageRecord> = {}): UsageRecord {
  return {
    id: uuidv7(),
    principal,
    type: "standalone",
    status: "completed",
    endpoint: "/v1/chat/completions",
    model: CHAT_MODEL,
    customId: null,
    streamId: null,
    usage: { promptTokens: 10, completionTokens: 20, cachedPromptTokens: 0 },
    costMicros: 0n,
    bodyJson: null,
    resultJson: null,
    errorJson: null,
    engineMs: 1,
    createdAt: new Date(),
    completedAt: new Date(),
    ...overrides,
  };
}
