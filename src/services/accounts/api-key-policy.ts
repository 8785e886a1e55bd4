/**
 * An API key's policy (issue 29, item 1): the limits an owner gives one key on top of the team's —
 * a budget in micro-USD per period (`day`, `week`, `month` in UTC, or `total`), requests and
 * tokens per minute, the models it may use (`*`: every model), and when it expires. This module
 * validates what `POST` and `PATCH /control/v1/auth/api-keys` send and merges a change onto the
 * key's policy; `ApiKeyService` stores it, the metering and ledger services enforce it.
 *
 * Rules:
 * - `budget_micros` needs a `budget_period` (given with it, or the key's own); `budget_period`
 *   without a budget is refused; `null` lifts a limit (`budget_micros: null` both fields).
 * - `allowed_models` lists 1–100 model ids; one `*` among them means every model (stored as null).
 * - A member may only tighten their own key's limits (`apiKeys.loosenLimits` in `policy.ts`):
 *   `loosened` names what a change would raise or lift.
 */
import { z } from "zod";
import type { BudgetPeriod } from "../../entities/api-key.entity.js";
import { AppError } from "../../shared/errors.js";
import { pgText } from "../platform/validation.js";

/** The budget periods, shortest first. */
export const BUDGET_PERIODS = ["day", "week", "month", "total"] as const satisfies readonly BudgetPeriod[];

/**
 * Cache-bus topic announcing that a key's policy changed (key: the key id): every process drops
 * its cached policy of the key and gives back its unpromised budget lease.
 */
export const API_KEY_POLICY_TOPIC = "api_key_policy";

/** PostgreSQL's integer maximum, the highest rate a key may be given. */
const INT4_MAX = 2_147_483_647;

/** The policy as stored on `api_keys` (null: no such limit). */
export interface KeyPolicy {
  budgetMicros: bigint | null;
  budgetPeriod: BudgetPeriod | null;
  rpmLimit: number | null;
  tpmLimit: number | null;
  /** Null: every model. */
  allowedModels: string[] | null;
  expiresAt: Date | null;
}

/** A policy with no limits. */
export const NO_POLICY: KeyPolicy = {
  budgetMicros: null,
  budgetPeriod: null,
  rpmLimit: null,
  tpmLimit: null,
  allowedModels: null,
  expiresAt: null,
};

const futureDate = z.iso
  .datetime({ offset: true })
  .transform((v) => new Date(v))
  .refine((d) => d.getTime() > Date.now(), "must be in the future");

/** The policy fields of the create and update bodies (absent: unchanged; null: lifted). */
export const keyPolicyFields = {
  budget_micros: z
    .number()
    .int()
    .min(0)
    .max(Number.MAX_SAFE_INTEGER)
    .nullish()
    .meta({ description: "Micro-USD the key may spend per budget_period; null: no budget of its own" }),
  budget_period: z
    .enum(BUDGET_PERIODS)
    .nullish()
    .meta({ description: "day, week (from Monday) or month in UTC, or total (never starts over)" }),
  rpm_limit: z.number().int().min(1).max(INT4_MAX).nullish().meta({ description: "requests per minute" }),
  tpm_limit: z
    .number()
    .int()
    .min(1)
    .max(INT4_MAX)
    .nullish()
    .meta({ description: "tokens (prompt + completion) per minute" }),
  allowed_models: z
    .array(pgText().trim().min(1).max(200))
    .min(1)
    .max(100)
    .nullish()
    .meta({ description: 'model ids the key may use; ["*"] or null: every model' }),
  expires_at: futureDate.nullish().meta({ description: "ISO 8601 date-time in the future; null: never" }),
};

/** A JSON Schema saying `field` is present and of JSON type `type`. */
const given = (field: string, type: string) => ({ required: [field], properties: { [field]: { type } } });

/**
 * `mergePolicy`'s budget rules on create (a key without a policy), as the OpenAPI document states
 * them (issue 28, item 5): a `budget_micros` needs a `budget_period` and a `budget_period` needs a
 * `budget_micros` (null is neither).
 */
export const CREATE_BUDGET_RULE = {
  allOf: [
    { if: given("budget_micros", "integer"), then: given("budget_period", "string") },
    { if: given("budget_period", "string"), then: given("budget_micros", "integer") },
  ],
};

/**
 * `mergePolicy`'s budget rules on update, as far as the body alone decides them (issue 28, item 5):
 * sent together, a budget needs a period and `budget_micros: null` (no budget) takes no period.
 * Sent alone, each counts with the key's own other half, which the document cannot know:
 * `UPDATE_BUDGET_NOTE` says it.
 */
export const UPDATE_BUDGET_RULE = {
  allOf: [
    {
      if: { ...given("budget_micros", "integer"), required: ["budget_micros", "budget_period"] },
      then: given("budget_period", "string"),
    },
    {
      if: { ...given("budget_micros", "null"), required: ["budget_micros", "budget_period"] },
      then: given("budget_period", "null"),
    },
  ],
  description:
    "Fields left out are unchanged; null lifts a limit. Sent alone, budget_micros counts in the key's own " +
    "budget_period and a budget_period sets the period of the key's own budget_micros: 400 naming " +
    "budget_period when the key has none to pair it with (or, for budget_period: null, while it has a budget).",
};

/** The policy part of a parsed create or update body. */
export type KeyPolicyInput = {
  [K in keyof typeof keyPolicyFields]?: z.output<(typeof keyPolicyFields)[K]>;
};

/**
 * `current` with the fields `input` names changed (absent: kept; null: lifted).
 * @throws AppError 400 naming `budget_period` when a budget would have no period, or a period no budget.
 */
export function mergePolicy(current: KeyPolicy, input: KeyPolicyInput): KeyPolicy {
  const next: KeyPolicy = { ...current };
  if (input.budget_micros !== undefined) {
    next.budgetMicros = input.budget_micros === null ? null : BigInt(input.budget_micros);
    if (input.budget_micros === null) next.budgetPeriod = null;
  }
  if (input.budget_period !== undefined && input.budget_micros !== null) next.budgetPeriod = input.budget_period;
  if (input.rpm_limit !== undefined) next.rpmLimit = input.rpm_limit;
  if (input.tpm_limit !== undefined) next.tpmLimit = input.tpm_limit;
  if (input.allowed_models !== undefined) next.allowedModels = normalizeModels(input.allowed_models);
  if (input.expires_at !== undefined) next.expiresAt = input.expires_at;
  if (next.budgetMicros !== null && next.budgetPeriod === null) {
    throw AppError.invalid("Invalid request: budget_period", [
      { field: "budget_period", message: "required with budget_micros: day, week, month or total" },
    ]);
  }
  if (next.budgetMicros === null && input.budget_period) {
    throw AppError.invalid("Invalid request: budget_period", [
      { field: "budget_period", message: "the key has no budget_micros to count in it" },
    ]);
  }
  return next;
}

/** Null (every model) when the list names `*`; else the ids without repeats, in order. */
function normalizeModels(models: string[] | null): string[] | null {
  if (models === null || models.includes("*")) return null;
  return [...new Set(models)];
}

/** Longer periods are stricter for the same amount (a month's budget spends at most that a month). */
const PERIOD_RANK: Record<BudgetPeriod, number> = { day: 0, week: 1, month: 2, total: 3 };

/**
 * The request fields whose change from `current` to `next` would raise or lift a limit: a higher
 * or removed budget, or a shorter period; higher or removed rates; a model not allowed before, or
 * every model; a later or no expiry. Empty when `next` is as strict as `current` or stricter.
 */
export function loosened(current: KeyPolicy, next: KeyPolicy): string[] {
  const fields: string[] = [];
  if (
    current.budgetMicros !== null &&
    (next.budgetMicros === null ||
      next.budgetMicros > current.budgetMicros ||
      PERIOD_RANK[next.budgetPeriod!] < PERIOD_RANK[current.budgetPeriod!])
  ) {
    fields.push(
      next.budgetMicros !== null && next.budgetMicros <= current.budgetMicros ? "budget_period" : "budget_micros",
    );
  }
  if (current.rpmLimit !== null && (next.rpmLimit === null || next.rpmLimit > current.rpmLimit))
    fields.push("rpm_limit");
  if (current.tpmLimit !== null && (next.tpmLimit === null || next.tpmLimit > current.tpmLimit))
    fields.push("tpm_limit");
  if (
    current.allowedModels !== null &&
    (next.allowedModels === null || next.allowedModels.some((m) => !current.allowedModels!.includes(m)))
  ) {
    fields.push("allowed_models");
  }
  if (current.expiresAt !== null && (next.expiresAt === null || next.expiresAt > current.expiresAt)) {
    fields.push("expires_at");
  }
  return fields;
}
