/**
 * Account resolver: signup, login, the current user, password reset. One service call per field.
 * Inputs arrive in the REST spelling (GraphQL inputs are mapped by `MappedArg`; the reset
 * mutations' plain arguments are put in the REST shape), and the services validate them.
 */
import { Arg, Ctx, Mutation, Query, Resolver } from "type-graphql";
import {
  ForgotPasswordResultType,
  LoginInputType,
  LoginResultType,
  ResetPasswordResultType,
  SignupInputType,
  SignupResultType,
  UserType,
} from "../schema/account.types.js";
import { MappedArg } from "../schema/mapped-arg.js";
import type {
  AccountService,
  CurrentUserDto,
  LoginInput,
  LoginResultDto,
  SignupInput,
  SignupResultDto,
  UserDto,
} from "../services/account.service.js";
import type { RequestContext } from "../services/context.js";
import type { MessageDto, PasswordResetService } from "../services/password-reset.service.js";

@Resolver()
export class AuthResolver {
  constructor(
    private readonly accounts: AccountService,
    private readonly passwordResets: PasswordResetService,
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

  @Query(() => UserType, { description: "The signed-in user." })
  me(@Ctx() ctx: RequestContext): Promise<UserDto> {
    return this.accounts.me(ctx);
  }

  /** Data-plane `GET /v1/auth/me` (REST only). */
  currentUser(ctx: RequestContext): CurrentUserDto {
    return this.accounts.currentUser(ctx);
  }
}
