#!/usr/bin/env node
// Legacy MCP test peer (protocol 2024-11-05 .. 2025-11-25) built on the
// official TypeScript SDK 1.x, spoken over stdio. Used by mrtr-gateway tests
// to check that server-initiated requests made *inside* a tools/call
// (elicitation, sampling, roots) and progress notifications cross the gateway.
//
// Run: node ts_server.mjs   (stdout carries JSON-RPC only; logs go to stderr)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const mcp = new McpServer({ name: "mrtr-ts-peer", version: "1.0.0" });
const text = (t) => ({ content: [{ type: "text", text: t }] });
// Tie server->client requests to the tools/call that caused them, so that on
// HTTP transports they would travel on that call's stream (no-op on stdio).
const related = (extra) => ({ relatedRequestId: extra.requestId });
// Note: a tool registered without inputSchema gets its handler called as (extra).

mcp.registerTool(
  "greet",
  { description: "Ask the user for a username (form elicitation), then greet them" },
  async (extra) => {
    const answer = await mcp.server.elicitInput(
      {
        message: "What is your username?",
        requestedSchema: {
          type: "object",
          properties: { username: { type: "string", title: "Username" } },
          required: ["username"],
        },
      },
      related(extra),
    );
    if (answer.action !== "accept") return text(`No greeting: user chose ${answer.action}`);
    return text(`Hello, ${answer.content.username}!`);
  },
);

mcp.registerTool(
  "summarize",
  { description: "Ask the client's model (sampling) to summarize a text", inputSchema: { text: z.string() } },
  async ({ text: input }, extra) => {
    const result = await mcp.server.createMessage(
      {
        messages: [{ role: "user", content: { type: "text", text: `Summarize: ${input}` } }],
        maxTokens: 100,
      },
      related(extra),
    );
    // 2025-11-25 allows content to be a single block or an array of blocks.
    const blocks = Array.isArray(result.content) ? result.content : [result.content];
    return text(blocks.filter((b) => b.type === "text").map((b) => b.text).join(""));
  },
);

mcp.registerTool(
  "list_roots",
  { description: "Return the client's root URIs, comma-separated" },
  async (extra) => {
    const { roots } = await mcp.server.listRoots(undefined, related(extra));
    return text(roots.map((r) => r.uri).join(","));
  },
);

mcp.registerTool(
  "progress",
  { description: "Send 3 progress notifications (if a progressToken was given), then return 'done'" },
  async (extra) => {
    const progressToken = extra._meta?.progressToken;
    for (let i = 1; i <= 3; i++) {
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken, progress: i, total: 3, message: `step ${i}/3` },
        });
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return text("done");
  },
);

mcp.registerTool(
  "large",
  { description: "Return a text of exactly `size` bytes (ASCII 'x')", inputSchema: { size: z.number().int().min(0) } },
  async ({ size }) => text("x".repeat(size)),
);

mcp.registerPrompt(
  "ask_prompt",
  { description: "A one-message prompt asking a question", argsSchema: { question: z.string() } },
  ({ question }) => ({
    messages: [{ role: "user", content: { type: "text", text: `Please answer: ${question}` } }],
  }),
);

mcp.registerResource(
  "server-info",
  "info://server",
  { description: "Static information about this test server", mimeType: "text/plain" },
  async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: "mrtr-ts-peer 1.0.0" }] }),
);

await mcp.connect(new StdioServerTransport());
console.error("mrtr-ts-peer: listening on stdio");
