/**
 * Account resolver: signup, login, the current user, password reset, OpenID Connect sign-in and
 * linking. One service call per field. Inputs arrive in the REST spelling (GraphQL inputs are
 * mapped by `MappedArg`; the reset mutations' plain arguments are put in the REST shape), and the
 * services validate them.
 */
import { Arg, Ctx, Mutation, Query, Resolver } from "type-graphql";
import {
  ForgotPasswordResultType,
  LoginInputType,
  LoginResultType,
  ResetPasswordResultType,
  SignupInputType,
  SignupResultType,
} from "../schema/account.types.js";
import { UserEntity } from "../entities/user.entity.js";
import { MappedArg } from "../schema/mapped-arg.js";
import {
  LinkOAuthResultType,
  LinkedAccountListType,
  OAuthAuthorizationType,
  OAuthCompleteInputType,
} from "../schema/oauth.types.js";
import type {
  AccountService,
  CurrentUserDto,
  LoginInput,
  LoginResultDto,
  SignupInput,
  SignupResultDto,
} from "../services/accounts/account.service.js";
import type { RequestContext } from "../services/platform/context.js";
import type {
  LinkOAuthDto,
  LinkedAccountsDto,
  OAuthAuthorizeDto,
  OAuthCompleteInput,
  OAuthService,
} from "../services/accounts/oauth/oauth.service.js";
import type { MessageDto, PasswordResetService } from "../services/accounts/password-reset.service.js";

@Resolver()
export class AuthResolver {
  constructor(
    private readonly accounts: AccountService,
    private readonly passwordResets: PasswordResetService,
    private readonly oauth: OAuthService,
  ) {}

  @Mutation(() => SignupResultType, { description: "Creates an account and its team (with the signup credit)." })
  signup(
    @MappedArg("input", () => SignupInputType, SignupInputType.toService) input: SignupInput,
    @Ctx() ctx: RequestContext,
  ): Promise<SignupResultDto> {
    return this.accounts.signup(ctx, input);
  }

  @Mutation(() => LoginResultType, { description: "Exchanges email and password for an access token." })
  login(
    @MappedArg("input", () => LoginInputType, LoginInputType.toService) input: LoginInput,
    @Ctx() ctx: RequestContext,
  ): Promise<LoginResultDto> {
    return this.accounts.login(ctx, input);
  }

  @Mutation(() => ForgotPasswordResultType, {
    description:
      "Mails a password-reset token (30 min, single use) when the email is registered; same answer either way.",
  })
  forgotPassword(@Arg("email", () => String) email: unknown, @Ctx() ctx: RequestContext): Promise<MessageDto> {
    return this.passwordResets.forgotPassword(ctx, { email });
  }

  @Mutation(() => ResetPasswordResultType, {
    description: "Sets a new password with a mailed token; access tokens issued before stop working.",
  })
  resetPassword(
    @Arg("token", () => String) token: unknown,
    @Arg("password", () => String) password: unknown,
    @Ctx() ctx: RequestContext,
  ): Promise<MessageDto> {
    return this.passwordResets.resetPassword(ctx, { token, password });
  }

  @Query(() => UserEntity, { description: "The signed-in user." })
  me(@Ctx() ctx: RequestContext): Promise<UserEntity> {
    return this.accounts.me(ctx);
  }

  /** Data-plane `GET /v1/auth/me` (REST only). */
  currentUser(ctx: RequestContext): CurrentUserDto {
    return this.accounts.currentUser(ctx);
  }

  @Mutation(() => OAuthAuthorizationType, {
    description:
      "Starts a sign-in with a provider: the authorization URL (state, nonce, PKCE). Signed in, the state may also link.",
  })
  oauthAuthorize(
    @Arg("provider", () => String) provider: string,
    @Ctx() ctx: RequestContext,
  ): Promise<OAuthAuthorizeDto> {
    return this.oauth.authorize(ctx, provider);
  }

  @Mutation(() => LoginResultType, { description: "Signs in with a provider's code or ID token (like login)." })
  oauthComplete(
    @MappedArg("input", () => OAuthCompleteInputType, OAuthCompleteInputType.toService) input: OAuthCompleteInput,
    @Ctx() ctx: RequestContext,
  ): Promise<LoginResultDto> {
    return this.oauth.complete(ctx, input);
  }

  @Mutation(() => LinkOAuthResultType, { description: "Links a provider identity to the signed-in user." })
  linkOAuth(
    @MappedArg("input", () => OAuthCompleteInputType, OAuthCompleteInputType.toService) input: OAuthCompleteInput,
    @Ctx() ctx: RequestContext,
  ): Promise<LinkOAuthDto> {
    return this.oauth.link(ctx, input);
  }

  @Query(() => LinkedAccountListType, { description: "The signed-in user's linked provider identities." })
  linkedAccounts(@Ctx() ctx: RequestContext): Promise<LinkedAccountsDto> {
    return this.oauth.linkedAccounts(ctx);
  }
}
