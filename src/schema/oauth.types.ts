/**
 * GraphQL types of OpenID Connect sign-in and linking (issue 8, items 2 and 6). Outputs keep the
 * REST (snake_case) DTO properties under camelCase GraphQL names; `LinkedAccount` is filled by
 * the service's one mapping from the identity entity (`toLinkedAccountDto`). The input uses the
 * GraphQL names and `toService` maps them (see `mapped-arg.ts`).
 */
import { Field, InputType, ObjectType } from "type-graphql";
import type {
  LinkOAuthDto,
  LinkedAccountDto,
  LinkedAccountsDto,
  OAuthAuthorizeDto,
  OAuthCompleteInput,
} from "../services/accounts/oauth/oauth.service.js";
import { absent } from "./mapped-arg.js";

@ObjectType("OAuthAuthorization", {
  description: "Where to send the browser to sign in with a provider, and the state to expect back.",
})
export class OAuthAuthorizationType implements OAuthAuthorizeDto {
  @Field() provider!: string;
  @Field({ name: "authorizationUrl" }) authorization_url!: string;
  @Field({ description: "Single use; compare it with the one the provider sends back, then pass it on." })
  state!: string;
  @Field({ name: "expiresAt" }) expires_at!: Date;
}

@ObjectType("LinkedAccount", { description: "A provider identity linked to the signed-in user." })
export class LinkedAccountType implements LinkedAccountDto {
  @Field() provider!: string;
  @Field({ description: "The provider's subject (`sub`)." }) subject!: string;
  @Field(() => String, { nullable: true }) email!: string | null;
  @Field({ name: "createdAt" }) created_at!: Date;
}

@ObjectType("LinkedAccountList")
export class LinkedAccountListType implements LinkedAccountsDto {
  @Field(() => [LinkedAccountType]) items!: LinkedAccountDto[];
}

@ObjectType("LinkOAuthResult")
export class LinkOAuthResultType extends LinkedAccountType implements LinkOAuthDto {
  @Field(() => String) message!: "Linked successfully.";
}

@InputType("OAuthCompleteInput", {
  description:
    "`code` with the authorize helper's `state` (or with the client's own `codeVerifier`), or an `idToken` the client obtained.",
})
export class OAuthCompleteInputType {
  @Field({ description: "A configured provider name." }) provider!: string;
  @Field(() => String, { nullable: true }) code?: string | null;
  @Field(() => String, { nullable: true, description: "The state from oauthAuthorize." }) state?: string | null;
  @Field(() => String, { nullable: true, description: "Only for a PKCE flow the client ran itself." })
  codeVerifier?: string | null;
  @Field(() => String, { nullable: true }) redirectUri?: string | null;
  @Field(() => String, { nullable: true, description: "The authorization response's `iss` parameter." })
  iss?: string | null;
  @Field(() => String, { nullable: true }) idToken?: string | null;
  @Field(() => String, { nullable: true, description: "Accepted, but never proof of identity alone." })
  accessToken?: string | null;
  @Field(() => String, { nullable: true }) inviteToken?: string | null;

  /** The service's input (REST names). */
  static toService(input: OAuthCompleteInputType): OAuthCompleteInput {
    return {
      provider: input.provider,
      code: absent(input.code),
      state: absent(input.state),
      code_verifier: absent(input.codeVerifier),
      redirect_uri: absent(input.redirectUri),
      iss: absent(input.iss),
      id_token: absent(input.idToken),
      access_token: absent(input.accessToken),
      invite_token: absent(input.inviteToken),
    };
  }
}
