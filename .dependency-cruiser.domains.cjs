/**
 * The service domains, lowest first (README, "Layout"). A domain may import the domains before it
 * in this list and never one after it, so each can be read, tested and changed knowing only what
 * lies below it.
 */
module.exports = [
  "platform", // request context, policy, validation, cache bus, job-queue port, mail, auth throttling
  "ledger", // credit_ledger (its one writer) and credit leases
  "events", // completion events feed and webhook deliveries
  "teams", // teams, members, invitations
  "accounts", // users, credentials, API keys, password reset, OAuth sign-in, socket sessions
  "models", // catalog, custom models, deployments, engine health
  "metering", // admission (rate limits, prices), activity records, the group commit
  "usage", // activity reads, billing summary, retention
  "billing", // payments, top-ups, invoices, refunds
  "inference", // the create operations, protocols, responses and streams
  "decisions", // scored decisions over inference
  "batches", // batches of any create operation
];
