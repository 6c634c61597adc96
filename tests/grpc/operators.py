"""Issue 21 item 1: an operator's program in another language drives control's Operators API.
Compiles the repository's protos with grpcio-tools, then with the operator credential from
SWITCHBOARD_OPERATOR_TOKEN: creates team:infra, makes alice its editor, asks to vend an
endpoint without consent (nothing made), vends it with consent, reads the audit, and calls
Operators with the endpoint credential it got (refused). Prints one JSON line for
tests/all/operators_api.rs.

    SWITCHBOARD_OPERATOR_TOKEN=sbo_… python operators.py --proto-root proto --addr 127.0.0.1:PORT
"""

import argparse
import importlib
import json
import os
import sys
import tempfile

from grpc_tools import protoc
import grpc


def compile_protos(proto_root: str, out: str) -> None:
    files = [
        "switchboard/control/v1/operators.proto",
        "switchboard/control/v1/control.proto",
        "switchboard/control/v1/rule_packs.proto",
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
    a = args.parse_args()
    token = os.environ["SWITCHBOARD_OPERATOR_TOKEN"]
    with tempfile.TemporaryDirectory() as out:
        compile_protos(a.proto_root, out)
        sys.path.insert(0, out)
        pb = importlib.import_module("switchboard.control.v1.operators_pb2")
        rpc = importlib.import_module("switchboard.control.v1.operators_pb2_grpc")
        with grpc.insecure_channel(a.addr) as channel:
            stub = rpc.OperatorsStub(channel)
            md = [("authorization", f"Bearer {token}")]
            stub.CreateTeam(pb.CreateTeamRequest(slug="infra", name="Infra"), metadata=md)
            stub.SetTeamMember(
                pb.SetTeamMemberRequest(team="infra", login="alice", role="editor"), metadata=md
            )
            ask = dict(human="alice", owner_scope="team:infra", verbs=["todos"])
            shown = stub.VendEndpoint(pb.VendEndpointRequest(**ask), metadata=md)
            if shown.vended or shown.credential:
                sys.exit("vended without consent")
            vended = stub.VendEndpoint(pb.VendEndpointRequest(consent=True, **ask), metadata=md)
            audit = stub.ListAuditEntries(pb.ListAuditEntriesRequest(limit=10), metadata=md)
            try:
                stub.ListTeams(
                    pb.ListTeamsRequest(),
                    metadata=[("authorization", f"Bearer {vended.credential}")],
                )
                refused = "OK"
            except grpc.RpcError as e:
                refused = e.code().name
    print(
        json.dumps(
            {
                "shown_families": [f.family for f in shown.families],
                "endpoint_id": vended.endpoint.id,
                "audit": [[e.action, e.target] for e in audit.entries],
                # Each entry's time as the Timestamp and as the deprecated milliseconds.
                "audit_at": [[e.at.ToMilliseconds(), e.at_ms] for e in audit.entries],
                "endpoint_refused": refused,
            }
        )
    )


if __name__ == "__main__":
    main()
