/**
 * GraphQL types of the account group. Output properties keep the REST (snake_case) names of the
 * DTOs the services return; `name` gives each its camelCase GraphQL name, so one object serves both
 * surfaces. Input types use the GraphQL names as properties (type-graphql ignores `name` on input
 * fields) and `toService` turns them into the service's input (see `mapped-arg.ts`).
 */
import { Field, InputType, Int, ObjectType } from "type-graphql";
import type { LoginInput, LoginResultDto, SignupInput, SignupResultDto } from "../services/accounts/account.service.js";
import { UserEntity } from "../entities/user.entity.js";
import type { MessageDto } from "../services/accounts/password-reset.service.js";
import { absent } from "./mapped-arg.js";

@ObjectType("LoginResult", { description: "An access token (HS256 JWT) and its user." })
export class LoginResultType implements LoginResultDto {
  @Field({ name: "accessToken" }) access_token!: string;
  @Field(() => String, { name: "tokenType" }) token_type!: "bearer";
  @Field(() => Int, { name: "expiresIn", description: "Seconds until the token expires." }) expires_in!: number;
  @Field(() => UserEntity) user!: UserEntity;
}

@ObjectType("SignupResult")
export class SignupResultType extends LoginResultType implements SignupResultDto {
  @Field() message!: string;
  @Field(() => String, { name: "nextStep" }) next_step!: "login";
}

@InputType("SignupInput")
export class SignupInputType {
  @Field() email!: string;
  @Field() password!: string;
  @Field(() => String, { nullable: true }) name?: string | null;
  @Field(() => String, { nullable: true, description: "Joins the inviting team instead of creating one." })
  inviteToken?: string | null;

  /** The service's input (REST names). */
  static toService(input: SignupInputType): SignupInput {
    return {
      email: input.email,
      password: input.password,
      name: absent(input.name),
      invite_token: absent(input.inviteToken),
    };
  }
}

@InputType("LoginInput", { description: "`username` is the email; `email` is accepted too." })
export class LoginInputType {
  @Field(() => String, { nullable: true }) username?: string | null;
  @Field(() => String, { nullable: true }) email?: string | null;
  @Field() password!: string;

  /** The service's input (REST names). */
  static toService(input: LoginInputType): LoginInput {
    return { username: absent(input.username), email: absent(input.email), password: input.password };
  }
}

@ObjectType("ForgotPasswordResult", {
  description: "ForgotPasswordResponse: the same message whether or not the email is registered.",
})
export class ForgotPasswordResultType implements MessageDto {
  @Field() message!: string;
}

@ObjectType("ResetPasswordResult", { description: "ResetPasswordResponse." })
export class ResetPasswordResultType implements MessageDto {
  @Field() message!: string;
}
