/**
 * API keys: create (`createApiKey` — the plaintext is shown this once, never again), list
 * (`apiKeys`: owners and admins see every key of the team; each with its budget, what it spent
 * this period and what is left, and its other limits) and revoke (`revokeApiKey`). Limits are set
 * through the API (`updateApiKey`); the page shows them.
 */
import { GraphqlError, gql } from "../api.js";
import { badge, count, fill, field, h, notice, row, table, usd, when } from "../dom.js";
import type { PageContext } from "../main.js";

interface ApiKey {
  id: string;
  name: string;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  expiresAt: string | null;
  revokedAt: string | null;
  budgetMicros: number | null;
  budgetPeriod: string | null;
  spentMicros: number | null;
  remainingMicros: number | null;
  budgetResetsAt: string | null;
  rpmLimit: number | null;
  tpmLimit: number | null;
  allowedModels: string[];
  user: { email: string } | null;
}

const LIST = `{ apiKeys { items { id name prefix createdAt lastUsedAt expiresAt revokedAt budgetMicros budgetPeriod
  spentMicros remainingMicros budgetResetsAt rpmLimit tpmLimit allowedModels user { email } } } }`;
const CREATE = `mutation ($input: CreateApiKeyInput!) { createApiKey(input: $input) { id name prefix plaintext } }`;
const REVOKE = `mutation ($id: String!) { revokeApiKey(id: $id) }`;

/** "$0.000083 of $0.000100/day" over "$0.000017 left, resets 2026-06-01", or "none". */
function budget(key: ApiKey): HTMLElement | string {
  if (key.budgetMicros === null) return "none";
  const per = key.budgetPeriod === "total" ? " in total" : `/${key.budgetPeriod}`;
  const resets = key.budgetResetsAt ? `, resets ${when(key.budgetResetsAt).slice(0, 10)}` : "";
  return h(
    "div",
    {},
    h("div", {}, `${usd(key.spentMicros ?? 0)} of ${usd(key.budgetMicros)}${per}`),
    h("small", {}, `${usd(key.remainingMicros ?? 0)} left${resets}`),
  );
}

/** "60 rpm, 10,000 tpm, models: a, b", or "none". */
function limits(key: ApiKey): string {
  const parts: string[] = [];
  if (key.rpmLimit !== null) parts.push(`${count(key.rpmLimit)} rpm`);
  if (key.tpmLimit !== null) parts.push(`${count(key.tpmLimit)} tpm`);
  if (!key.allowedModels.includes("*")) parts.push(`models: ${key.allowedModels.join(", ")}`);
  return parts.join(", ") || "none";
}

function keyStatus(key: ApiKey): string {
  if (key.revokedAt) return "revoked";
  if (key.expiresAt && new Date(key.expiresAt) <= new Date()) return "expired";
  return "active";
}

export async function keysPage(ctx: PageContext): Promise<void> {
  const listSlot = h("div");
  const createdSlot = h("div", { "aria-live": "polite" });
  const status = h("div", { class: "status-slot" });

  async function load(): Promise<void> {
    try {
      const { apiKeys } = await gql<{ apiKeys: { items: ApiKey[] } }>(LIST);
      const rows = apiKeys.items.map((key) => {
        const state = keyStatus(key);
        const revokeButton =
          state === "active"
            ? h(
                "button",
                {
                  type: "button",
                  class: "danger small",
                  "aria-label": `Revoke key ${key.name} (${key.prefix})`,
                  onclick: () => void revoke(key),
                },
                "Revoke",
              )
            : null;
        const tr = row(
          key.name,
          h("code", {}, `${key.prefix}…`),
          badge(state),
          when(key.createdAt),
          when(key.lastUsedAt) || "never",
          when(key.expiresAt) || "never",
          budget(key),
          limits(key),
          key.user?.email ?? "(left the team)",
          revokeButton,
        );
        tr.dataset.keyId = key.id;
        return tr;
      });
      fill(
        listSlot,
        table(
          "API keys",
          ["Name", "Prefix", "Status", "Created", "Last used", "Expires", "Budget", "Limits", "Owner", ""],
          rows,
          "No keys yet.",
        ),
      );
    } catch (err) {
      fill(listSlot, notice("error", err instanceof Error ? err.message : "Could not load the keys"));
    }
  }

  async function revoke(key: ApiKey): Promise<void> {
    if (!confirm(`Revoke the key "${key.name}" (${key.prefix}…)? Requests with it will be refused.`)) return;
    try {
      await gql(REVOKE, { id: key.id });
      fill(status, notice("ok", `Key "${key.name}" revoked.`));
    } catch (err) {
      fill(status, notice("error", err instanceof Error ? err.message : "Could not revoke the key"));
    }
    await load();
  }

  const name = h("input", { type: "text", name: "name", required: true, maxlength: 200, autocomplete: "off" });
  const expires = h("input", { type: "date", name: "expiresAt" });
  const button = h("button", { type: "submit" }, "Create key");
  const form = h(
    "form",
    { class: "card inline-form", "aria-labelledby": "create-key-title" },
    h("h2", { id: "create-key-title" }, "Create a key"),
    field("Name", name),
    field("Expires (optional)", expires, "The key stops working at the end of this day (UTC)."),
    button,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    button.disabled = true;
    const input: Record<string, string> = { name: name.value.trim() };
    if (expires.value) input.expiresAt = new Date(`${expires.value}T23:59:59Z`).toISOString();
    gql<{ createApiKey: { id: string; name: string; prefix: string; plaintext: string } }>(CREATE, { input })
      .then(async ({ createApiKey: created }) => {
        name.value = "";
        expires.value = "";
        const secret = h("input", {
          type: "text",
          readonly: true,
          value: created.plaintext,
          class: "secret",
          "data-testid": "new-key",
        });
        const copy = h(
          "button",
          {
            type: "button",
            class: "small",
            onclick: () => {
              secret.select();
              void navigator.clipboard?.writeText(created.plaintext).catch(() => undefined);
            },
          },
          "Copy",
        );
        fill(
          createdSlot,
          h(
            "div",
            { class: "card shown-once", role: "status" },
            h("h2", {}, `Key "${created.name}" created`),
            h("p", {}, "Copy it now: it is shown this once and cannot be read again."),
            h("div", { class: "secret-row" }, field("Your new API key", secret), copy),
          ),
        );
        await load();
        secret.focus();
        secret.select();
      })
      .catch((err: unknown) => {
        fill(createdSlot, notice("error", err instanceof GraphqlError ? err.message : "Could not create the key"));
      })
      .finally(() => {
        button.disabled = false;
      });
  });

  ctx.main.append(h("h1", { tabindex: -1 }, "API keys"), form, createdSlot, status, h("h2", {}, "Keys"), listSlot);
  await load();
}
