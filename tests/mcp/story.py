"""SPEC-0031's story, driven through the Switchboard MCP gateway by a real MCP client this
project did not write: the Python `mcp` package (pinned in requirements.txt).

Run by tests/all/mcp_e2e.rs against a running gateway + control + router, once per protocol
mode: `legacy` (the session-based versions: an initialize handshake first) and `2026-07-28`
(the stateless version: every request self-contained). Every step prints one line; any
failed check exits non-zero naming the step.

    python story.py --url http://127.0.0.1:PORT/mcp --mode legacy \
        --token-a CRED --token-a-no-install CRED --token-b CRED \
        --webhook-a WH_ID --webhook-b WH_ID --webhook-hand WH_ID
"""

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

PACK = "drop-ci-noise"


class StoryFailed(Exception):
    pass


def check(condition: bool, what: str, evidence: Any = None) -> None:
    if not condition:
        detail = "" if evidence is None else f": {json.dumps(evidence, default=str)[:2000]}"
        raise StoryFailed(f"{what}{detail}")


def step(name: str, **facts: Any) -> None:
    print(json.dumps({"step": name, **facts}, default=str), flush=True)


def connect(url: str, token: str, mode: str) -> Client:
    """A client whose every HTTP request carries the endpoint credential."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(120.0, connect=10.0),
    )
    return Client(streamable_http_client(url, http_client=http), mode=mode)


def result_json(result: Any) -> dict[str, Any]:
    """A successful result: structured content, and the same JSON as its one text block."""
    check(not result.is_error, "the call succeeded", result.model_dump(mode="json"))
    structured = result.structured_content
    check(isinstance(structured, dict), "structured content is an object", structured)
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(len(texts) == 1, "one text block", texts)
    check(json.loads(texts[0]) == structured, "the text is the same JSON as the structured content")
    return structured


def error_json(result: Any) -> dict[str, Any]:
    """A business error: isError, one JSON text block {"error": {code, message, details}}, no
    structured content."""
    dumped = result.model_dump(mode="json")
    check(result.is_error, "the call failed as a tool result", dumped)
    check(result.structured_content is None, "an error has no structured content", dumped)
    check(len(result.content) == 1, "an error is one content block", dumped)
    error = json.loads(result.content[0].text)["error"]
    check(isinstance(error.get("code"), str), "the error has a code", error)
    check(isinstance(error.get("message"), str), "the error has a message", error)
    check(isinstance(error.get("details"), dict), "the error has details", error)
    return error


async def tool_names(client: Client) -> list[str]:
    listing = await client.list_tools()
    return [t.name for t in listing.tools]


async def rules_of(client: Client, webhook: str) -> dict[str, Any]:
    return result_json(await client.call_tool("list_webhook_rules", {"webhook_id": webhook}))


async def story(args: argparse.Namespace) -> None:
    mode = args.mode
    async with connect(args.url, args.token_a, mode) as a:
        step("connected", mode=mode, protocol_version=a.protocol_version)
        if mode == "legacy":
            check(a.protocol_version < "2026-07-28", "a session-based version was negotiated", a.protocol_version)
        else:
            check(a.protocol_version == mode, "the stateless version is in use", a.protocol_version)

        names = await tool_names(a)
        check(names == sorted(names), "tools are sorted by name", names)
        check("install_rule_pack" in names and "list_rule_packs" in names, "A is offered the pack tools", names)
        listing = await a.list_tools()
        install_tool = next(t for t in listing.tools if t.name == "install_rule_pack")
        check("SAVES NOTHING" in (install_tool.description or ""), "the install tool teaches the two calls")
        check(install_tool.annotations.destructive_hint is False, "planning an install is not marked destructive")
        confirm_tool = next(t for t in listing.tools if t.name == "confirm_rule_pack_plan")
        check(confirm_tool.annotations.destructive_hint is True, "the confirm is marked destructive")
        check("confirm" not in install_tool.input_schema.get("properties", {}), "the planning call takes no confirm", install_tool.input_schema)
        check(install_tool.annotations.open_world_hint is False, "install is not open-world")
        step("tools listed", count=len(names))

        # 1. list packs
        packs = result_json(await a.call_tool("list_rule_packs", {}))
        pack_names = [p["name"] for p in packs["packs"]]
        check(PACK in pack_names, "the catalog has drop-ci-noise", pack_names)
        step("packs listed", packs=pack_names)

        before = await rules_of(a, args.webhook_a)
        step("rules before", version=before["version"], rules=len(before["configuration"].get("rules", [])))

        # 2. plan: the first call saves nothing
        progress: list[tuple[float, float | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total))

        plan = result_json(
            await a.call_tool(
                "install_rule_pack",
                {"webhook_id": args.webhook_a, "name": PACK, "params": {"bot_actors": ["ci-bot[bot]"]}},
                progress_callback=on_progress,
            )
        )
        token = plan.get("plan_token")
        check(isinstance(token, str) and token, "the plan has a plan_token", plan)
        check(plan.get("nothing_saved") is True, "the plan says nothing was saved", plan)
        check(isinstance(plan.get("expires_at"), str), "the plan says when it expires", plan)
        check(plan.get("pack", {}).get("name") == PACK, "the plan names the pack", plan.get("pack"))
        check(plan.get("confirm_with", {}).get("tool") == "confirm_rule_pack_plan", "the plan names the confirming call", plan.get("confirm_with"))
        check(plan["confirm_with"].get("arguments", {}).get("webhook_id") == args.webhook_a, "with the webhook to confirm on", plan.get("confirm_with"))
        check(plan.get("events_replayed", 0) > 0, "the plan replayed the webhook's deliveries", plan)
        check(len(progress) > 0, "progress notifications arrived during the replay", progress)
        check(progress[-1][1] is not None and progress[-1][0] <= progress[-1][1], "progress counts toward a total", progress)
        version = plan["pack"]["version"]
        step("planned", version=version, events_replayed=plan["events_replayed"], proven=plan.get("proven"), progress=len(progress))

        after_plan = await rules_of(a, args.webhook_a)
        check(after_plan["version"] == before["version"], "planning saved nothing (version)", after_plan)
        check(after_plan["configuration"] == before["configuration"], "planning saved nothing (rules)", after_plan)
        check(PACK not in after_plan["installed_packs"], "planning installed nothing", after_plan["installed_packs"])
        step("nothing saved by the plan")

        # A hand-written candidate gets the same evidence: test_webhook_rules with replay.
        replayed = result_json(
            await a.call_tool(
                "test_webhook_rules",
                {
                    "webhook_id": args.webhook_a,
                    "replay": {"limit": 50},
                    "configuration": {"rules": [{"when": ".event == \"status\"", "action": {"drop": True}}]},
                },
            )
        )
        report = replayed.get("replay_report") or {}
        check(report.get("events_replayed", 0) > 0, "a replay reports over the stored deliveries", replayed)
        check(replayed["minted_rule_ids"], "the id-less candidate rule was given an id", replayed)
        check("plan_token" not in report, "a dry-run replay has no plan_token", report)
        step("replayed a candidate", events_replayed=report["events_replayed"], minted=replayed["minted_rule_ids"])

        # 3. confirm
        confirm = {"webhook_id": args.webhook_a, "plan_token": token}
        if not plan.get("proven"):
            confirm["allow_unproven"] = True
        applied = result_json(await a.call_tool("confirm_rule_pack_plan", confirm))
        check(applied.get("saved") is True, "the confirm saved", applied)
        installed_rules = await rules_of(a, args.webhook_a)
        check(installed_rules["version"] > before["version"], "the configuration version moved", installed_rules)
        ids = [r.get("id") for r in installed_rules["configuration"]["rules"]]
        check(any(i and i.startswith(f"{PACK}--") for i in ids), "the pack's rules are saved", ids)
        step("confirmed", version=installed_rules["version"])

        # 4. list packs shows the installed version
        listed = result_json(await a.call_tool("list_rule_packs", {"webhook_id": args.webhook_a}))
        entry = next(p for p in listed["packs"] if p["name"] == PACK)
        check((entry.get("installed") or {}).get("version") == version, "list_rule_packs shows the installed version", entry.get("installed"))
        step("installed version listed", version=version)

        # 5. a second confirm of the same token is plan_stale
        again = error_json(await a.call_tool("confirm_rule_pack_plan", confirm))
        check(again["code"] == "plan_stale", "a used token is plan_stale", again)
        check("next" in again["details"], "the error names the next call", again)
        step("second confirm refused", code=again["code"])

        # A fresh plan of A's, for B to present below.
        fresh = result_json(await a.call_tool("install_rule_pack", {"webhook_id": args.webhook_a, "name": PACK}))
        fresh_token = fresh["plan_token"]
        settled = await rules_of(a, args.webhook_a)

    # 6. an endpoint without install_rule_pack is not offered it, and is refused calling it
    async with connect(args.url, args.token_a_no_install, mode) as limited:
        names = await tool_names(limited)
        check("install_rule_pack" not in names, "the tool is not offered without the verb", names)
        check("list_rule_packs" in names, "the endpoint's other verbs are offered", names)
        try:
            refused = await limited.session.call_tool(
                "install_rule_pack", {"webhook_id": args.webhook_a, "name": PACK}
            )
            error = error_json(refused)
            check(error["code"] == "permission_denied", "a direct call is refused", error)
            how = error["code"]
        except MCPError as e:  # a client may also surface the refusal as a protocol error
            raise StoryFailed(f"the refusal should be a tool result, got a protocol error: {e}")
        step("verb off the allowlist refused", code=how)

    # 7. human B's endpoint presenting A's token: not_found, and nothing saved
    async with connect(args.url, args.token_b, mode) as b:
        for webhook in (args.webhook_a, args.webhook_b):
            stolen = error_json(
                await b.call_tool("confirm_rule_pack_plan", {"webhook_id": webhook, "plan_token": fresh_token})
            )
            check(stolen["code"] == "not_found", "A's token is not_found for B", stolen)
        foreign = error_json(await b.call_tool("list_webhook_rules", {"webhook_id": args.webhook_a}))
        check(foreign["code"] == "not_found", "A's webhook is not_found for B", foreign)
        step("another owner's token refused", code="not_found")

        # 8. grants are an operator's: B's scope was allowed no queues, so its agent creates none
        before = result_json(await b.call_tool("list_webhooks", {}))
        outside = error_json(
            await b.call_tool("create_webhook", {"source_type": "github", "grant": ["forge", "pager"]})
        )
        check(outside["code"] == "grant_not_allowed", "a grant outside the allowance is refused", outside)
        check(outside["details"].get("outside") == ["forge", "pager"], "the refusal names the queues", outside)
        check(outside["details"].get("allowed") == [], "and what the scope may grant (nothing)", outside)
        check("switchboard admin scope allow" in outside["details"].get("next", ""), "the next step names the operator's command", outside)
        after = result_json(await b.call_tool("list_webhooks", {}))
        check(len(after["webhooks"]) == len(before["webhooks"]), "nothing was created", after)
        step("a grant outside the allowance refused", code="grant_not_allowed")


    async with connect(args.url, args.token_a, mode) as a:
        unchanged = await rules_of(a, args.webhook_a)
        check(unchanged["version"] == settled["version"], "B's attempts saved nothing", unchanged)
        # Bad input from a real client: a wrong type is a clear tool error, and the gateway goes on.
        wrong = error_json(await a.session.call_tool("list_webhook_rules", {"webhook_id": 7}))
        check(wrong["code"] == "invalid_argument", "a wrong type is invalid_argument", wrong)

        # 9. hand-written rules: the agent's JSON reaches control as typed messages
        saved = result_json(await a.call_tool("set_webhook_rules", {
            "webhook_id": args.webhook_hand,
            "configuration": {"rules": [{"when": ".kind == \"push\"", "action": {"drop": True}}]},
        }))
        check([r["id"] for r in saved["configuration"]["rules"]] == ["r-1"], "an id-less rule is given one", saved)
        await a.call_tool("update_webhook_rule", {
            "webhook_id": args.webhook_hand, "rule_id": "r-1", "rule": {"description": "pushes"},
        })
        rules = await rules_of(a, args.webhook_hand)
        rule = rules["configuration"]["rules"][0]
        check(rule.get("description") == "pushes" and rule["action"] == {"drop": True}, "the patch merged", rules)
        shape = error_json(await a.call_tool("set_webhook_rules", {
            "webhook_id": args.webhook_hand, "configuration": {"rules": [], "extra": 1},
        }))
        check(shape["code"] == "invalid_configuration", "a configuration's shape problem is invalid_configuration", shape)
        check(shape["details"]["problems"][0]["code"] == "invalid_configuration", "listed as a problem", shape)
        patch = error_json(await a.call_tool("update_webhook_rule", {
            "webhook_id": args.webhook_hand, "rule_id": "r-1", "rule": {"whenn": "true"},
        }))
        check(patch["code"] == "invalid_argument" and patch["details"].get("field") == "rule", "a bad patch names the field", patch)
        check((await rules_of(a, args.webhook_hand))["version"] == rules["version"], "the refusals saved nothing", rules)
        step("hand-written rules set and patched", version=rules["version"])

        # 10. names (issue 48): the agent names a webhook; listings show it beside the id.
        renamed = result_json(await a.call_tool("rename_webhook", {
            "webhook_id": args.webhook_hand, "name": " hand-written (story) ",
        }))
        check(renamed["webhook"]["name"] == "hand-written (story)", "the name is trimmed and returned", renamed)
        listed = result_json(await a.call_tool("list_webhooks", {}))
        names = {w["id"]: w["name"] for w in listed["webhooks"]}
        check(names.get(args.webhook_hand) == "hand-written (story)", "list_webhooks shows the name beside the id", names)
        bad = error_json(await a.call_tool("rename_webhook", {"webhook_id": args.webhook_hand, "name": "x" * 81}))
        check(bad["code"] == "invalid_argument" and bad["details"].get("field") == "name", "a too-long name names the field", bad)
        check((await rules_of(a, args.webhook_hand))["version"] == rules["version"], "a name changes no rules", rules)
        step("webhook named", webhook_name=renamed["webhook"]["name"])
        step("done", mode=mode)


def story_failure(error: BaseException) -> StoryFailed | None:
    """The StoryFailed inside `error`: the client's task groups wrap what a step raised."""
    if isinstance(error, StoryFailed):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = story_failure(inner)
            if found is not None:
                return found
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", required=True, choices=["legacy", "2026-07-28"])
    parser.add_argument("--token-a", required=True)
    parser.add_argument("--token-a-no-install", required=True)
    parser.add_argument("--token-b", required=True)
    parser.add_argument("--webhook-a", required=True)
    parser.add_argument("--webhook-b", required=True)
    parser.add_argument("--webhook-hand", required=True)
    args = parser.parse_args()
    try:
        asyncio.run(story(args))
    except BaseException as e:  # noqa: BLE001 - report the failed step, re-raise anything else
        failed = story_failure(e)
        if failed is None:
            raise
        print(f"STORY FAILED ({args.mode}): {failed}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
