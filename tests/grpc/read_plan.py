"""Issue 19: a service written in another language reads a plan's fields from the typed
messages, without parsing any JSON. Compiles the repository's protos with grpcio-tools (a
protoc this project did not write), calls RulePacks.InstallRulePack with grpcio, and prints
what it read from the `plan` message's fields as one JSON line for tests/all/rule_packs.rs to
compare with the plan it got itself.

    python read_plan.py --proto-root proto --addr 127.0.0.1:PORT --token CRED --webhook WH_ID
"""

import argparse
import importlib
import json
import sys
import tempfile

from grpc_tools import protoc
import grpc


def compile_protos(proto_root: str, out: str) -> None:
    files = [
        "switchboard/control/v1/rule_packs.proto",
        "switchboard/control/v1/control.proto",
    ]
    include = protoc._get_resource_file_name("grpc_tools", "_proto")
    code = protoc.main(
        ["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
        + files
    )
    if code != 0:
        sys.exit(f"protoc failed with {code}")


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--proto-root", required=True)
    args.add_argument("--addr", required=True)
    args.add_argument("--token", required=True)
    args.add_argument("--webhook", required=True)
    a = args.parse_args()
    with tempfile.TemporaryDirectory() as out:
        compile_protos(a.proto_root, out)
        sys.path.insert(0, out)
        pb = importlib.import_module("switchboard.control.v1.rule_packs_pb2")
        rpc = importlib.import_module("switchboard.control.v1.rule_packs_pb2_grpc")
        with grpc.insecure_channel(a.addr) as channel:
            stub = rpc.RulePacksStub(channel)
            request = pb.InstallRulePackRequest(webhook_id=a.webhook, name="drop-ci-noise")
            metadata = [("authorization", f"Bearer {a.token}")]
            plan = None
            progress = 0
            for event in stub.InstallRulePack(request, metadata=metadata):
                which = event.WhichOneof("event")
                if which == "progress":
                    progress += 1
                elif which == "plan":
                    plan = event.plan
                    break
            if plan is None:
                sys.exit("the stream ended without a typed plan")
            report = plan.report
            first = report.transitions[0] if report.transitions else None
            print(
                json.dumps(
                    {
                        "kind": pb.PlanKind.Name(plan.kind),
                        "pack": plan.pack.name,
                        "version": plan.pack.version,
                        "events_replayed": report.events_replayed,
                        "changed": report.changed,
                        "totals_before": dict(report.totals_before),
                        "totals_after": dict(report.totals_after),
                        "first_transition": None
                        if first is None
                        else {
                            "from": getattr(first, "from"),
                            "to": first.to,
                            "count": first.count,
                            "by_rules": [
                                {
                                    "before_rule": s.before_rule if s.HasField("before_rule") else None,
                                    "after_rule": s.after_rule if s.HasField("after_rule") else None,
                                    "count": s.count,
                                }
                                for s in first.by_rules
                            ],
                        },
                        "rules": [r.id for r in report.rules],
                        "fixtures_passed": sum(1 for f in plan.fixtures if f.passed),
                        "proven": plan.proven,
                        "token_prefix": plan.plan_token[:4],
                        # The expiry as the Timestamp and as the deprecated RFC 3339 text.
                        "expires_at_ms": plan.expires_at_time.ToMilliseconds(),
                        "expires_at": plan.expires_at,
                        "confirm_tool": plan.confirm_with.tool,
                        "progress_events": progress > 0,
                    },
                    sort_keys=True,
                )
            )


if __name__ == "__main__":
    main()
