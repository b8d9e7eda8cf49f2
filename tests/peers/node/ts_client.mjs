#!/usr/bin/env node
// Legacy (2025) MCP test client built on the official TypeScript SDK 1.x, over
// Streamable HTTP: `initialize`, `notifications/initialized`, the session's GET
// stream, then a script of steps, then DELETE. Used by mrtr-gateway tests to show
// a second 2025 client implementation through the gateway's legacy lane.
//
// The server's requests are answered as a 2025 host answers them:
// - elicitation (form): accept, with content made from the requested schema
//   (strings "alice", numbers 30, booleans true, "color" green, "city" Paris,
//   "topic" autumn); URL mode: accept;
// - sampling: an assistant message "SAMPLED[<prompt text>]" from "fake-model";
// - roots: two file:// roots.
//
// Run: node ts_client.mjs < command.json
//   command: {"url", "steps": [{"op": "call", "name", "arguments"?, "progress"?}
//             | {"op": "request", "method", "args"?}]}
//   answer (one JSON line on stdout): {"initialize", "session_id", "steps": [...]}
//   each step: {"result", "seen", "progress"} or {"error": {code, message}}
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

const ROOTS = [
  { uri: "file:///srv/peers-root-a", name: "root-a" },
  { uri: "file:///srv/peers-root-b", name: "root-b" },
];
const PICKED = { color: "green", city: "Paris", topic: "autumn" };

function synthesise(schema) {
  const content = {};
  for (const [name, prop] of Object.entries(schema?.properties ?? {})) {
    if (prop.type === "integer" || prop.type === "number") content[name] = 30;
    else if (prop.type === "boolean") content[name] = true;
    else content[name] = PICKED[name] ?? "alice";
  }
  return content;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

const command = await readStdin();
let seen = { elicitations: [], samplings: [], roots: 0 };
const client = new Client(
  { name: "mrtr-ts-client", version: "1.0.0" },
  { capabilities: { elicitation: { form: {}, url: {} }, sampling: {}, roots: { listChanged: true } } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const params = request.params;
  seen.elicitations.push(params.message);
  if (params.mode === "url") return { action: "accept" };
  return { action: "accept", content: synthesise(params.requestedSchema) };
});
client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
  const text = request.params.messages
    .map((m) => (m.content?.type === "text" ? m.content.text : ""))
    .join(" ");
  seen.samplings.push(text);
  return {
    role: "assistant",
    content: { type: "text", text: `SAMPLED[${text}]` },
    model: "fake-model",
    stopReason: "endTurn",
  };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  seen.roots += 1;
  return { roots: ROOTS };
});

async function step(item) {
  seen = { elicitations: [], samplings: [], roots: 0 };
  const progress = [];
  const args = item.args ?? {};
  let result;
  if (item.op === "call") {
    const options = item.progress
      ? { onprogress: (p) => progress.push({ progress: p.progress, total: p.total ?? null }) }
      : undefined;
    result = await client.callTool({ name: item.name, arguments: item.arguments ?? {} }, undefined, options);
  } else if (item.method === "list_tools") result = await client.listTools();
  else if (item.method === "list_prompts") result = await client.listPrompts();
  else if (item.method === "list_resources") result = await client.listResources();
  else if (item.method === "list_resource_templates") result = await client.listResourceTemplates();
  else if (item.method === "get_prompt") result = await client.getPrompt({ name: args.name, arguments: args.arguments });
  else if (item.method === "read_resource") result = await client.readResource({ uri: args.uri });
  else if (item.method === "ping") result = await client.ping();
  else if (item.method === "set_logging_level") result = await client.setLoggingLevel(args.level);
  else throw new Error(`unknown step ${JSON.stringify(item)}`);
  return { result, seen, progress };
}

const transport = new StreamableHTTPClientTransport(new URL(command.url));
await client.connect(transport);
const answer = {
  initialize: {
    protocolVersion: transport.protocolVersion ?? null,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
  },
  session_id: transport.sessionId,
  steps: [],
};
for (const item of command.steps) {
  try {
    answer.steps.push(await step(item));
  } catch (error) {
    if (!(error instanceof McpError)) throw error;
    answer.steps.push({ error: { code: error.code, message: error.message } });
  }
}
await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(answer) + "\n");
