/** Account resolver: signup, login, the current user. One service call per field. */
import { Arg, Ctx, Mutation, Query, Resolver } from "type-graphql";
import {
  LoginInputType,
  LoginResultType,
  SignupInputType,
  SignupResultType,
  UserType,
} from "../schema/account.types.js";
import type {
  AccountService,
  CurrentUserDto,
  LoginResultDto,
  SignupResultDto,
  UserDto,
} from "../services/account.service.js";
import type { RequestContext } from "../services/context.js";

@Resolver()
export class AuthResolver {
  constructor(private readonly accounts: AccountService) {}

  @Mutation(() => SignupResultType, { description: "Creates an account and its team (with the signup credit)." })
  signup(
    @Arg("input", () => SignupInputType) input: SignupInputType,
    @Ctx() ctx: RequestContext,
  ): Promise<SignupResultDto> {
    return this.accounts.signup(ctx, input);
  }

  @Mutation(() => LoginResultType, { description: "Exchanges email and password for an access token." })
  login(
    @Arg("input", () => LoginInputType) input: LoginInputType,
    @Ctx() ctx: RequestContext,
  ): Promise<LoginResultDto> {
    return this.accounts.login(ctx, input);
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
