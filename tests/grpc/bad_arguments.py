"""Issue 49 item 1: a service written in another language calls every RPC of control's API
with a bad argument and reads what went wrong from the typed error details alone: the
google.rpc.Status (grpcio-status), its ErrorInfo, BadRequest and PreconditionFailure, and our
RefusalDetails, compiled by grpcio-tools from this repository's protos. Prints one JSON
object, by `Service.Method`, for tests/all/error_details.rs to check against its table; the
script itself only reads, it judges nothing but that every status has a google.rpc.Status.

    python bad_arguments.py --proto-root proto --addr 127.0.0.1:PORT --token CRED \
        --operator-token OP --webhook WH_ID --scope SCOPE
"""

import argparse
import importlib
import json
import sys
import tempfile

from grpc_tools import protoc
from grpc_status import rpc_status
from google.rpc import error_details_pb2
import grpc

FILES = [
    "switchboard/control/v1/control.proto",
    "switchboard/control/v1/operators.proto",
    "switchboard/control/v1/rule_packs.proto",
    "switchboard/control/v1/rule_trials.proto",
    "switchboard/control/v1/errors.proto",
]


def compile_protos(proto_root: str, out: str) -> None:
    include = protoc._get_resource_file_name("grpc_tools", "_proto")
    code = protoc.main(
        ["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
        + FILES
    )
    if code != 0:
        sys.exit(f"protoc failed with {code}")


def module(name: str):
    return importlib.import_module(f"switchboard.control.v1.{name}")


def read_error(error: grpc.RpcError, errors_pb) -> dict:
    """What a client learns from a refusal's typed details, and nothing from its text but
    whether the message starts with the reason."""
    out = {"code": error.code().name, "has_status": False}
    status = rpc_status.from_call(error)
    if status is None:
        return out
    out["has_status"] = True
    for any_ in status.details:
        if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_.Unpack(info)
            out["reason"] = info.reason
            out["domain"] = info.domain
            out["metadata"] = dict(info.metadata)
            out["message_starts_with_reason"] = status.message.startswith(f"{info.reason}: ")
        elif any_.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            any_.Unpack(bad)
            out["fields"] = [v.field for v in bad.field_violations]
        elif any_.Is(error_details_pb2.PreconditionFailure.DESCRIPTOR):
            failure = error_details_pb2.PreconditionFailure()
            any_.Unpack(failure)
            out["preconditions"] = [v.type for v in failure.violations]
        elif any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            out["retry"] = True
        elif any_.Is(errors_pb.RefusalDetails.DESCRIPTOR):
            refusal = errors_pb.RefusalDetails()
            any_.Unpack(refusal)
            out["refusal"] = sorted(f.name for f, _ in refusal.ListFields())
        else:
            out.setdefault("unknown_details", []).append(any_.type_url)
    return out


def main() -> None:
    args = argparse.ArgumentParser()
    for flag in ["--proto-root", "--addr", "--token", "--operator-token", "--webhook", "--scope"]:
        args.add_argument(flag, required=True)
    a = args.parse_args()
    with tempfile.TemporaryDirectory() as out:
        compile_protos(a.proto_root, out)
        sys.path.insert(0, out)
        control, control_rpc = module("control_pb2"), module("control_pb2_grpc")
        ops, ops_rpc = module("operators_pb2"), module("operators_pb2_grpc")
        packs, packs_rpc = module("rule_packs_pb2"), module("rule_packs_pb2_grpc")
        trials, trials_rpc = module("rule_trials_pb2"), module("rule_trials_pb2_grpc")
        errors_pb = module("errors_pb2")
        wh, scope = a.webhook, a.scope
        endpoint = [("authorization", f"Bearer {a.token}")]
        operator = [("authorization", f"Bearer {a.operator_token}")]
        nobody = [("authorization", "Bearer sbe_not_a_credential")]
        bad_rule = control.Configuration(
            rules=[control.Rule(id="broken", when="((", action="queue:forge")]
        )
        results = {}
        with grpc.insecure_channel(a.addr) as channel:
            stubs = {
                "Webhooks": control_rpc.WebhooksStub(channel),
                "WebhookRules": control_rpc.WebhookRulesStub(channel),
                "Todos": control_rpc.TodosStub(channel),
                "Identity": control_rpc.IdentityStub(channel),
                "Operators": ops_rpc.OperatorsStub(channel),
                "RulePacks": packs_rpc.RulePacksStub(channel),
                "RuleTrials": trials_rpc.RuleTrialsStub(channel),
            }
            # Each RPC with one bad argument (or, for one that takes none, a bad credential).
            cases = [
                ("Webhooks", "CreateWebhook", control.CreateWebhookRequest(source_type=99, grant=["forge"]), endpoint),
                ("Webhooks", "ListWebhooks", control.ListWebhooksRequest(), nobody),
                ("Webhooks", "GetWebhook", control.GetWebhookRequest(webhook_id="wh_nope"), endpoint),
                ("Webhooks", "DeleteWebhook", control.DeleteWebhookRequest(webhook_id="wh_nope"), endpoint),
                ("Webhooks", "RotateWebhookSecret", control.RotateWebhookSecretRequest(webhook_id=wh, secret="short"), endpoint),
                ("Webhooks", "RenameWebhook", control.RenameWebhookRequest(webhook_id=wh, name="x" * 200), endpoint),
                ("Webhooks", "ListWebhookEvents", control.ListWebhookEventsRequest(webhook_id=wh, limit=5000), endpoint),
                ("Webhooks", "GetWebhookEvent", control.GetWebhookEventRequest(webhook_id=wh, event_id="ev_nope"), endpoint),
                ("Webhooks", "ExplainWebhookEvent", control.ExplainWebhookEventRequest(event_id="ev_nope"), endpoint),
                ("Webhooks", "RedriveWebhookEvents", control.RedriveWebhookEventsRequest(webhook_id=wh, limit=1_000_000), endpoint),
                ("Webhooks", "ConfirmWebhookRedrive", control.ConfirmWebhookRedriveRequest(webhook_id=wh, plan_token=""), endpoint),
                ("WebhookRules", "ListWebhookRules", control.ListWebhookRulesRequest(webhook_id="wh_nope"), endpoint),
                ("WebhookRules", "SetWebhookRules", control.SetWebhookRulesRequest(webhook_id=wh, configuration=bad_rule), endpoint),
                ("WebhookRules", "UpdateWebhookRule", control.UpdateWebhookRuleRequest(webhook_id=wh, rule_id="everything", patch=control.RulePatch(when="((")), endpoint),
                ("WebhookRules", "DeleteWebhookRule", control.DeleteWebhookRuleRequest(webhook_id=wh, rule_id="no-such-rule"), endpoint),
                ("WebhookRules", "TestWebhookRules", control.TestWebhookRulesRequest(webhook_id=wh), endpoint),
                ("WebhookRules", "TestWebhookRulesStream", control.TestWebhookRulesRequest(webhook_id=wh), endpoint),
                ("WebhookRules", "ListWebhookHistory", control.ListWebhookHistoryRequest(webhook_id=wh, limit=5000), endpoint),
                ("WebhookRules", "ListWebhookChanges", control.ListWebhookChangesRequest(webhook_id=wh, limit=5000), endpoint),
                ("WebhookRules", "PlanWebhookRules", control.PlanWebhookRulesRequest(webhook_id=wh, configuration=bad_rule), endpoint),
                ("Todos", "ListTodos", control.ListTodosRequest(queue="forge", filter=99), endpoint),
                ("Todos", "ClaimTodo", control.ClaimTodoRequest(todo_id="td_nope"), endpoint),
                ("Todos", "ReleaseTodo", control.ReleaseTodoRequest(todo_id="td_nope"), endpoint),
                ("Todos", "CompleteTodo", control.CompleteTodoRequest(todo_id="td_nope"), endpoint),
                ("Identity", "WhoAmI", control.WhoAmIRequest(), nobody),
                ("Operators", "CreateHuman", ops.CreateHumanRequest(login=""), operator),
                ("Operators", "ListHumans", ops.ListHumansRequest(limit=5000), operator),
                ("Operators", "DeleteHuman", ops.DeleteHumanRequest(login="nobody-here"), operator),
                ("Operators", "CreateSignInLink", ops.CreateSignInLinkRequest(login="nobody-here"), operator),
                ("Operators", "CreateTeam", ops.CreateTeamRequest(slug="Not A Slug", name="x"), operator),
                ("Operators", "ListTeams", ops.ListTeamsRequest(limit=5000), operator),
                ("Operators", "DeleteTeam", ops.DeleteTeamRequest(slug="no-such-team"), operator),
                ("Operators", "SetTeamMember", ops.SetTeamMemberRequest(team="infra", login="alice", role="boss"), operator),
                ("Operators", "RemoveTeamMember", ops.RemoveTeamMemberRequest(team="no-such-team", login="alice"), operator),
                ("Operators", "ProvisionWebhook", ops.ProvisionWebhookRequest(owner_scope="somewhere", source_type=1, grant=["forge"]), operator),
                ("Operators", "ListScopeWebhooks", ops.ListScopeWebhooksRequest(owner_scope="somewhere"), operator),
                ("Operators", "DeprovisionWebhook", ops.DeprovisionWebhookRequest(webhook_id="wh_nope"), operator),
                ("Operators", "SetWebhookGrant", ops.SetWebhookGrantRequest(webhook_id=wh, grant=[]), operator),
                ("Operators", "SetWebhookName", ops.SetWebhookNameRequest(webhook_id=wh, name="x" * 200), operator),
                ("Operators", "SetWebhookConfirmPolicy", ops.SetWebhookConfirmPolicyRequest(webhook_id=wh, policy="maybe"), operator),
                ("Operators", "SetWebhookClaimTtl", ops.SetWebhookClaimTtlRequest(webhook_id=wh, ttl_secs=0), operator),
                ("Operators", "SetWebhookGuardDefault", ops.SetWebhookGuardDefaultRequest(webhook_id=wh, on_breach="explode"), operator),
                ("Operators", "SetWebhookApprovalRule", ops.SetWebhookApprovalRuleRequest(webhook_id="wh_nope"), operator),
                ("Operators", "SetGrantAllowance", ops.SetGrantAllowanceRequest(owner_scope="somewhere", queues=["forge"]), operator),
                ("Operators", "GetGrantAllowance", ops.GetGrantAllowanceRequest(owner_scope="somewhere"), operator),
                ("Operators", "ClearGrantAllowance", ops.ClearGrantAllowanceRequest(owner_scope="somewhere"), operator),
                ("Operators", "ListGrantAllowances", ops.ListGrantAllowancesRequest(), nobody),
                ("Operators", "VendEndpoint", ops.VendEndpointRequest(human="alice", owner_scope=scope, verbs=["teleport"]), operator),
                ("Operators", "RevokeEndpoint", ops.RevokeEndpointRequest(endpoint_id="ep_nope"), operator),
                ("Operators", "ListEndpoints", ops.ListEndpointsRequest(owner_scope="somewhere"), operator),
                ("Operators", "ListAuditEntries", ops.ListAuditEntriesRequest(limit=5000), operator),
                ("Operators", "ListChanges", ops.ListChangesRequest(limit=5000), operator),
                ("Operators", "VerifyChangeLog", ops.VerifyChangeLogRequest(), nobody),
                ("Operators", "CreateOperatorCredential", ops.CreateOperatorCredentialRequest(name=""), operator),
                ("Operators", "ListOperatorCredentials", ops.ListOperatorCredentialsRequest(), nobody),
                ("Operators", "RevokeOperatorCredential", ops.RevokeOperatorCredentialRequest(id="op_nope"), operator),
                ("RulePacks", "ListRulePacks", packs.ListRulePacksRequest(webhook_id="wh_nope"), endpoint),
                ("RulePacks", "InstallRulePack", packs.InstallRulePackRequest(webhook_id=wh, name="drop-ci-noise", params_json='{"keep_ci_success": "yes"}'), endpoint),
                ("RulePacks", "RemoveRulePack", packs.RemoveRulePackRequest(webhook_id=wh, name=""), endpoint),
                ("RulePacks", "GetRulePackPlan", packs.GetRulePackPlanRequest(plan_token="pt_nope"), endpoint),
                ("RulePacks", "ConfirmRulePackPlan", packs.ConfirmRulePackPlanRequest(webhook_id=wh, plan_token="pt_nope"), endpoint),
                ("RuleTrials", "StartRuleTrial", trials.StartRuleTrialRequest(webhook_id=wh, plan_token="pt_nope"), endpoint),
                ("RuleTrials", "StopRuleTrial", trials.StopRuleTrialRequest(trial_id="tr_nope"), endpoint),
                ("RuleTrials", "GetRuleTrial", trials.GetRuleTrialRequest(trial_id="tr_nope"), endpoint),
                ("RuleTrials", "ListRuleTrials", trials.ListRuleTrialsRequest(webhook_id="wh_nope"), endpoint),
                ("RuleTrials", "PromoteRuleTrial", trials.PromoteRuleTrialRequest(trial_id="tr_nope"), endpoint),
                ("RuleTrials", "GetRuleGuard", trials.GetRuleGuardRequest(webhook_id=wh, guard_id="gd_nope"), endpoint),
            ]
            for service, method, request, metadata in cases:
                call = getattr(stubs[service], method)
                name = f"{service}.{method}"
                try:
                    answer = call(request, metadata=metadata, timeout=60)
                    # A streaming call fails when read.
                    if hasattr(answer, "__iter__") and not hasattr(answer, "ListFields"):
                        for _ in answer:
                            pass
                    results[name] = {"code": "OK"}
                except grpc.RpcError as error:
                    results[name] = read_error(error, errors_pb)
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
