/**
 * OpenID Connect sign-in (issue 8, item 2): `oauth_identities` links a provider's subject to a
 * user (one user may hold several; a `(provider, subject)` pair belongs to one user), and
 * `oauth_states` keeps each started authorization flow (state, PKCE verifier, nonce) until it is
 * completed once or expires.
 */
import type { MigrationInterface, QueryRunner } from "typeorm";

/** Creates `oauth_identities` and `oauth_states` (`down` drops them). */
export class OAuthIdentities1764610000000 implements MigrationInterface {
  name = "OAuthIdentities1764610000000";

  async up(q: QueryRunner): Promise<void> {
    await q.query(`
      CREATE TABLE oauth_identities (
        id uuid PRIMARY KEY,
        -- The configured provider name (config oauthProviders[].name).
        provider text NOT NULL,
        -- The provider's "sub" claim: stable and unique within the provider.
        subject text NOT NULL,
        user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
        -- The email the provider reported when the identity was linked (null when it shared none).
        email text,
        email_verified boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT oauth_identities_provider_subject_key UNIQUE (provider, subject)
      )`);
    await q.query(`CREATE INDEX oauth_identities_user_idx ON oauth_identities (user_id, created_at)`);
    await q.query(`
      CREATE TABLE oauth_states (
        -- SHA-256 of the state handed to the client: a database read yields no usable state.
        state_hash bytea PRIMARY KEY,
        provider text NOT NULL,
        code_verifier text NOT NULL,
        nonce text NOT NULL,
        redirect_uri text NOT NULL,
        -- Set when the flow was started by a signed-in user: only they may link with it.
        user_id uuid REFERENCES users (id) ON DELETE CASCADE,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
      )`);
    await q.query(`CREATE INDEX oauth_states_expires_idx ON oauth_states (expires_at)`);
  }

  async down(q: QueryRunner): Promise<void> {
    await q.query(`DROP TABLE oauth_states`);
    await q.query(`DROP TABLE oauth_identities`);
  }
}
