// A real client of the client matrix: the Vercel AI SDK (npm `ai` with
// `@ai-sdk/openai-compatible`), the framework many TypeScript chat apps are built on. Its SSE
// reader is its own (not the OpenAI SDK's).
//
//     node ai_sdk.mjs
//
// Runs a plain chat, a streamed chat and a streamed tool call against OPENAI_BASE_URL (which
// `chatgate client-probe` points at its proxy), prints what it read as one JSON line per call, and
// for a call that throws prints `FAILED <call>: <error>` to stderr and exits 1 at the end. Used by
// tests/it/client_matrix.rs; the versions are pinned in tests/clients/package.json.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, jsonSchema, streamText, tool } from "ai";

const MESSAGES = [{ role: "user", content: "What is the weather in Zürich?" }];
const provider = createOpenAICompatible({
  name: "chatgate",
  baseURL: process.env.OPENAI_BASE_URL,
  apiKey: process.env.OPENAI_API_KEY,
});
const model = provider.chatModel("model");
const common = { model, messages: MESSAGES, maxOutputTokens: 48, maxRetries: 0 };
const tools = {
  get_weather: tool({
    description: "The current weather in a city",
    inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
  }),
};

async function chat() {
  const r = await generateText(common);
  return { content: r.text };
}

// Errors in a stream arrive as parts; they are thrown here so the run fails.
async function stream() {
  let text = "";
  for await (const part of streamText(common).fullStream) {
    if (part.type === "error") throw part.error;
    if (part.type === "text-delta") text += part.text ?? part.delta ?? "";
  }
  return { content: text };
}

async function toolStream() {
  const calls = [];
  for await (const part of streamText({ ...common, tools }).fullStream) {
    if (part.type === "error") throw part.error;
    if (part.type === "tool-call") calls.push({ name: part.toolName, arguments: part.input });
  }
  if (calls.length === 0) throw new Error("the stream carried no tool call");
  return { tool_calls: calls };
}

let failed = false;
for (const [name, call] of [["chat", chat], ["stream", stream], ["tool-stream", toolStream]]) {
  try {
    console.log(JSON.stringify({ [name]: await call() }));
  } catch (e) {
    console.error(`FAILED ${name}: ${e?.name ?? "Error"}: ${e?.message ?? e}`.replaceAll("\n", " "));
    failed = true;
  }
}
process.exit(failed ? 1 : 0);
