// A typed MCP client reads Switchboard's gateway (issue 49 item 6): the official TypeScript SDK
// lists every tool (compiling each output schema with ajv, which warns on a format it does not
// know), then calls tools whose results it validates against those schemas. Any warning, any
// validation failure or a missing field fails the check.
//
//   node check.cjs <dir with node_modules> <mcp url> <bearer> <webhook id>
//
// Prints one JSON line: what it saw. Exit status 0 only when everything held.
"use strict";

const path = require("node:path");
const { createRequire } = require("node:module");

const [dir, url, bearer, webhookId] = process.argv.slice(2);
if (!dir || !url || !bearer || !webhookId) {
  console.error("usage: node check.cjs <dir> <mcp url> <bearer> <webhook id>");
  process.exit(2);
}
const sdk = createRequire(path.join(path.resolve(dir), "package.json"));
const { Client } = sdk("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = sdk("@modelcontextprotocol/sdk/client/streamableHttp.js");

// Whatever the SDK (and ajv inside it) says on the console is a finding.
const said = [];
for (const level of ["log", "warn", "error"]) {
  console[level] = (...args) => said.push(args.map(String).join(" "));
}

const problems = [];
function check(condition, what) {
  if (!condition) problems.push(what);
}

async function main() {
  const client = new Client({ name: "switchboard-ts-check", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
  });
  await client.connect(transport);
  const { tools } = await client.listTools();
  check(tools.length > 20, `only ${tools.length} tools listed`);
  check(tools.every((t) => t.outputSchema), "a tool has no output schema");

  // Each result is validated by the SDK against the tool's output schema; a mismatch throws.
  const called = [];
  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args });
    called.push(name);
    check(!result.isError, `${name} answered an error: ${JSON.stringify(result.content)}`);
    return result.structuredContent;
  };
  const listed = await call("list_webhooks", {});
  const mine = (listed?.webhooks ?? []).find((w) => w.id === webhookId);
  check(mine !== undefined, "list_webhooks does not list the webhook");
  const got = await call("get_webhook", { webhook_id: webhookId });
  const webhook = got?.webhook ?? {};
  for (const field of ["confirm_policy", "name", "config_version", "grant"]) {
    check(field in webhook, `get_webhook has no ${field}`);
  }
  await call("list_webhook_rules", { webhook_id: webhookId });
  await call("list_rule_packs", { webhook_id: webhookId });
  await call("list_webhook_events", { webhook_id: webhookId, limit: 5 });
  await call("list_todos", { queue: "forge", limit: 5 });
  await client.close();

  const warnings = said.filter((line) => /unknown format|warn|error/i.test(line));
  const report = { tools: tools.length, called, warnings, problems };
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(warnings.length === 0 && problems.length === 0 ? 0 : 1);
}

main().catch((error) => {
  process.stdout.write(
    JSON.stringify({ failed: String(error && error.stack ? error.stack : error), said, problems }) + "\n",
  );
  process.exit(1);
});
