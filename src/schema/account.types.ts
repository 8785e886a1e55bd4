/**
 * GraphQL types of the account group. Properties keep the REST (snake_case) names of the DTOs the
 * services return; `name` gives each its camelCase GraphQL name, so one object serves both surfaces.
 */
import { Field, InputType, Int, ObjectType } from "type-graphql";
import type { LoginResultDto, SignupResultDto, UserDto } from "../services/account.service.js";
import type { TeamRole } from "../entities/user.entity.js";

@ObjectType("User", { description: "The signed-in user (UserResponse)." })
export class UserType implements UserDto {
  @Field({ description: "The email address." }) username!: string;
  @Field(() => String, { description: "Team role: owner, admin or member." }) role!: TeamRole;
  @Field() id!: string;
  @Field() email!: string;
  @Field() name!: string;
  @Field({ name: "teamId" }) team_id!: string;
  @Field({ name: "createdAt" }) created_at!: Date;
}

@ObjectType("LoginResult", { description: "An access token (HS256 JWT) and its user." })
export class LoginResultType implements LoginResultDto {
  @Field({ name: "accessToken" }) access_token!: string;
  @Field(() => String, { name: "tokenType" }) token_type!: "bearer";
  @Field(() => Int, { name: "expiresIn", description: "Seconds until the token expires." }) expires_in!: number;
  @Field(() => UserType) user!: UserDto;
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
  @Field({ nullable: true }) name?: string;
  @Field({ name: "inviteToken", nullable: true }) invite_token?: string;
}

@InputType("LoginInput", { description: "`username` is the email; `email` is accepted too." })
export class LoginInputType {
  @Field({ nullable: true }) username?: string;
  @Field({ nullable: true }) email?: string;
  @Field() password!: string;
}
