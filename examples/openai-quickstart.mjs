// The README's openai-client example ("Try it"):
//   SWITCHYARD_BASE_URL=$BASE/v1 SWITCHYARD_API_KEY=sk_… node examples/openai-quickstart.mjs
// SWITCHYARD_BASE_URL defaults to http://localhost:$PORT/v1, PORT to 8080.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.SWITCHYARD_BASE_URL ?? `http://localhost:${process.env.PORT ?? 8080}/v1`,
  apiKey: process.env.SWITCHYARD_API_KEY,
});

const completion = await client.chat.completions.create({
  model: "tinystories-260k",
  messages: [{ role: "user", content: "Once upon a time" }],
  max_tokens: 40,
});
console.log(completion.choices[0].message.content);

const response = await client.responses.create({
  model: "tinystories-260k",
  input: "Lily found a ball",
  max_output_tokens: 40,
});
console.log(response.output_text);

const embedding = await client.embeddings.create({ model: "tinystories-260k-embed", input: "a red ball" });
console.log(embedding.data[0].embedding.length, "dimensions");
