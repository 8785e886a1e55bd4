/** Small readers shared by the inference tests: a batch's results once it ended, a streamed tool call. */
import { http } from "./harness.js";

/**
 * `GET /v1/batches/{id}/results` until `results` is set (the batch ended), every 100 ms, at most
 * 300 times (30 s); null when it never ended in that time.
 */
export async function batchResults(url: string, key: string, batchId: string): Promise<any[] | null> {
  for (let i = 0; i < 300; i++) {
    const results = (await http(url, "GET", `/v1/batches/${batchId}/results`, { token: key })).body.results;
    if (results) return results;
    await new Promise((r) => setTimeout(r, 100));
  }
  return null;
}

/** A streamed chat completion read whole: its `delta.tool_calls` in order, its text and its finish reason. */
export async function readToolCallStream(
  stream: AsyncIterable<{
    choices: Array<{ delta: { tool_calls?: unknown[]; content?: string | null }; finish_reason?: string | null }>;
  }>,
): Promise<{ deltas: any[]; content: string; finish: string | null }> {
  const deltas: any[] = [];
  let finish: string | null = null;
  let content = "";
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.tool_calls) deltas.push(...choice.delta.tool_calls);
    content += choice.delta.content ?? "";
    finish = choice.finish_reason ?? finish;
  }
  return { deltas, content, finish };
}
