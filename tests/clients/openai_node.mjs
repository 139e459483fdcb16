// A real client of the client matrix: the OpenAI Node SDK (npm `openai`), as an app uses it.
//
//     node openai_node.mjs
//
// Runs a plain chat, a streamed chat and a streamed tool call against OPENAI_BASE_URL (which
// `chatgate client-probe` points at its proxy), prints what it read as one JSON line per call, and
// for a call that throws prints `FAILED <call>: <error>` to stderr and exits 1 at the end. Used by
// tests/it/client_matrix.rs; the versions are pinned in tests/clients/package.json.
import OpenAI from "openai";

const MESSAGES = [{ role: "user", content: "What is the weather in Zürich?" }];
const TOOLS = [{ type: "function", function: {
  name: "get_weather",
  description: "The current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
} }];

const client = new OpenAI({ maxRetries: 0, timeout: 30000 });

async function chat() {
  const r = await client.chat.completions.create({ model: "model", messages: MESSAGES, max_tokens: 48 });
  return { content: r.choices[0].message.content };
}

async function stream() {
  let text = "";
  const s = await client.chat.completions.create({ model: "model", messages: MESSAGES, max_tokens: 48, stream: true });
  for await (const chunk of s) text += chunk.choices?.[0]?.delta?.content ?? "";
  return { content: text };
}

async function toolStream() {
  const calls = new Map();
  const s = await client.chat.completions.create({ model: "model", messages: MESSAGES, max_tokens: 48, tools: TOOLS, stream: true });
  for await (const chunk of s) {
    for (const tc of chunk.choices?.[0]?.delta?.tool_calls ?? []) {
      const c = calls.get(tc.index) ?? { name: "", arguments: "" };
      c.name += tc.function?.name ?? "";
      c.arguments += tc.function?.arguments ?? "";
      calls.set(tc.index, c);
    }
  }
  if (calls.size === 0) throw new Error("the stream carried no tool call");
  return { tool_calls: [...calls.entries()].sort((a, b) => a[0] - b[0])
    .map(([, c]) => ({ name: c.name, arguments: JSON.parse(c.arguments) })) };
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
