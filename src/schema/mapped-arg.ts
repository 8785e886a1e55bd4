/**
 * Input objects and their two spellings. type-graphql names an input field after its property
 * (the `name` option of `@Field` is honoured on object types only), so `@InputType` classes use
 * the camelCase GraphQL names, and `MappedArg` hands the resolver the service's input in the REST
 * (snake_case) spelling. REST passes its body through unchanged; the service validates both alike,
 * so both surfaces report the same 400 details.
 */
import { type ClassType, type ParameterDecorator, createParameterDecorator } from "type-graphql";

/**
 * Declares the GraphQL argument `name` of input type `type`, and passes `toService(value)` to the
 * resolver instead of the type-graphql instance.
 */
export function MappedArg<TGraphql extends object, TService>(
  name: string,
  type: () => ClassType<TGraphql>,
  toService: (input: TGraphql) => TService,
): ParameterDecorator {
  return createParameterDecorator(({ args }) => toService(args[name] as TGraphql), {
    arg: { name, typeFunc: type },
  });
}

/** GraphQL's explicit `null` for an optional input field means the field was left out. */
export function absent<T>(value: T | null | undefined): T | undefined {
  return value ?? undefined;
}
