/**
 * GraphQL types of decisions (issue 11, item 6): the answer of `createDecision`, the REST body
 * with `answers` as a free-form JSON object (its shape per question type is DESIGN §3 Decisions').
 */
import { Field, Int, ObjectType } from "type-graphql";
import { JSONObjectScalar } from "../shared/json-scalar.js";

@ObjectType("DecisionUsage")
export class DecisionUsageType {
  @Field(() => Int, { name: "inputTokens" }) input_tokens!: number;
  @Field(() => Int, { name: "outputTokens" }) output_tokens!: number;
}

@ObjectType("Decision", { description: "Calibrated probabilities for each question (POST /v1/decisions)." })
export class DecisionType {
  @Field() model!: string;
  @Field(() => JSONObjectScalar, {
    description:
      "By question name: choice {type, choice, confidence, probabilities}, score {type, score, confidence, legend, probabilities}, noul {type, noul}.",
  })
  answers!: unknown;
  @Field(() => DecisionUsageType) usage!: DecisionUsageType;
}
