/**
 * GraphQL types of stored responses (spec: Response; issue 6, item 7): the REST object in
 * camelCase, with the output text flattened (`outputText`), as the SDKs' `output_text` does.
 */
import { Field, Int, ObjectType } from "type-graphql";

@ObjectType("ResponseError")
export class ResponseErrorType {
  @Field() code!: string;
  @Field() message!: string;
}

@ObjectType("ResponseUsage")
export class ResponseUsageType {
  @Field(() => Int) inputTokens!: number;
  @Field(() => Int) outputTokens!: number;
  @Field(() => Int) totalTokens!: number;
  @Field(() => Int) cachedTokens!: number;
}

@ObjectType("ResponseFunctionCall", { description: "A function call the model made (output item `function_call`)." })
export class ResponseFunctionCallType {
  @Field({ description: "The output item's id (fc_…)." }) id!: string;
  @Field({ description: "The call's id (call_…), which a function_call_output input item answers." })
  callId!: string;
  @Field() name!: string;
  @Field({ description: "The arguments, JSON text." }) arguments!: string;
}

@ObjectType("Response", { description: "A stored Response (spec: Response)." })
export class ResponseType {
  @Field() id!: string;
  @Field(() => Int, { description: "Unix seconds." }) createdAt!: number;
  @Field() model!: string;
  @Field({ description: "in_progress, completed, incomplete, failed or cancelled." }) status!: string;
  @Field(() => String, { nullable: true, description: "`max_output_tokens` when incomplete." })
  incompleteReason!: string | null;
  @Field(() => String, { nullable: true, description: "The generated text; null while in progress." })
  outputText!: string | null;
  @Field(() => ResponseErrorType, { nullable: true }) error!: ResponseErrorType | null;
  @Field(() => ResponseUsageType, { nullable: true }) usage!: ResponseUsageType | null;
  @Field() serviceTier!: string;
  @Field(() => [ResponseFunctionCallType], {
    description: "The function calls in its output (empty for a text answer).",
  })
  functionCalls!: ResponseFunctionCallType[];
}

@ObjectType("ResponseSummary", { description: "A list item (spec: Response list item)." })
export class ResponseSummaryType {
  @Field() id!: string;
  @Field(() => Int, { description: "Unix seconds." }) createdAt!: number;
  @Field() model!: string;
  @Field() status!: string;
}

@ObjectType("ResponseList")
export class ResponseListType {
  @Field(() => [ResponseSummaryType]) data!: ResponseSummaryType[];
  @Field() hasMore!: boolean;
}
