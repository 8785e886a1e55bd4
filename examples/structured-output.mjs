// The structured-output example of docs/structured-outputs-and-tools.md:
//   SWITCHYARD_API_KEY=sk_… node examples/structured-output.mjs
// (SWITCHYARD_BASE_URL defaults to http://localhost:$PORT/v1, PORT to 8080). The answer is decoded
// under the schema's grammar, so `parsed` is always a valid Pet, even from the tiny test model.
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const client = new OpenAI({
  baseURL: process.env.SWITCHYARD_BASE_URL ?? `http://localhost:${process.env.PORT ?? 8080}/v1`,
  apiKey: process.env.SWITCHYARD_API_KEY,
});

const Pet = z.object({
  name: z.string().max(20),
  age: z.number().int().min(0).max(30),
  kind: z.enum(["cat", "dog", "bird"]),
  nickname: z.string().max(10).nullable(),
});

const completion = await client.chat.completions.parse({
  model: "tinystories-260k",
  messages: [{ role: "user", content: "Describe the pet in the story as JSON." }],
  response_format: zodResponseFormat(Pet, "pet"),
  max_tokens: 200,
});
console.log(completion.choices[0].message.parsed);
