/** Small conventions shared by the protocol modules (DESIGN §3 Identifiers and time). */

/** A date as Unix seconds (`created`, `created_at` of OpenAI-shaped objects). */
export function unixSeconds(date: Date): number {
  return Math.floor(date.getTime() / 1000);
}

/** `msg_<request uuid without dashes>`: the id of an Anthropic message or a Responses output message. */
export function messageId(requestId: string): string {
  return `msg_${requestId.replace(/-/g, "")}`;
}
