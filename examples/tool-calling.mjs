// The tool-calling example of docs/structured-outputs-and-tools.md:
//   SWITCHYARD_API_KEY=sk_… node examples/tool-calling.mjs
// (SWITCHYARD_BASE_URL defaults to http://localhost:$PORT/v1, PORT to 8080). A forced call decodes
// under the grammar of the function's parameters, so the arguments always parse, even from the
// tiny model.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.SWITCHYARD_BASE_URL ?? `http://localhost:${process.env.PORT ?? 8080}/v1`,
  apiKey: process.env.SWITCHYARD_API_KEY,
});

const runner = client.chat.completions.runTools({
  model: "tinystories-260k",
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
  tool_choice: { type: "function", function: { name: "get_weather" } },
  max_tokens: 120,
  tools: [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "The weather in a city",
        parameters: {
          type: "object",
          properties: { city: { type: "string", maxLength: 20 }, unit: { enum: ["celsius", "fahrenheit"] } },
          required: ["city", "unit"],
          additionalProperties: false,
        },
        parse: JSON.parse,
        function: ({ city, unit }) => `It is sunny in ${city} (22 degrees ${unit}).`,
      },
    },
  ],
});
const call = (await runner.finalFunctionToolCall()) ?? {};
console.log("called", call.name, "with", call.arguments);
console.log("result:", await runner.finalFunctionToolCallResult());
