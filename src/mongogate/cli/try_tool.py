"""`mongogate try TOOL --tenant T --args JSON`: a query tool's policy on given arguments, no MCP.

It takes the steps a call takes, in the same order and with the same code (argument bounds,
then the policy walk, then tenant injection), and prints either the exact command the
database would receive (Extended JSON: dates stay dates) or the refusal exactly as the model
would read it, plus the audit event the server would write. Nothing is written unless
``--audit`` is given; ``--execute`` also runs the command and prints the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from mongogate.cli.common import registry_for, settings_from
from mongogate.config import Settings
from mongogate.errors import MongogateError
from mongogate.specs import AggregateToolSpec, QueryToolSpec

#: the subject shown in the audit event when --sub is not given
DEFAULT_SUBJECT = "try"
#: exit status when the call is refused (0: it would run)
REFUSED = 1


def cmd_try(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    registry = registry_for(settings, args.demo)
    specs = {s.name: s for s in registry.query_specs}
    spec = specs.get(args.tool)
    if spec is None:
        from mongogate.server.surface import unknown_tool

        names = [t.name for t in registry.build(settings)]
        if args.tool in names:
            raise MongogateError(f"try runs query tools only; {args.tool!r} is not one: {', '.join(specs)}")
        raise unknown_tool(args.tool, names)
    try:
        arguments = json.loads(args.args)
    except ValueError as e:
        raise MongogateError(f"--args is not JSON: {e}; give an object such as '{{\"filter\": {{}}}}'") from e
    except RecursionError:  # what the server's own reader refuses long before (tools/bounds.py)
        raise MongogateError(
            f"--args is nested too deeply to read; a tool call may nest at most "
            f"{settings.limits.max_argument_depth} levels (limits.max_argument_depth)"
        ) from None
    report = anyio.run(_try, settings, registry, spec, arguments, args)
    if args.json:
        print(_extended_json(report, indent=None))
    else:
        _print_report(report)
    return 0 if report["allowed"] else REFUSED


async def _try(
    settings: Settings, registry: Any, spec: QueryToolSpec, arguments: object, args: argparse.Namespace
) -> dict[str, Any]:
    from mongogate.assembly import unwritten_audit
    from mongogate.audit import allowed_names
    from mongogate.errors import PolicyViolation
    from mongogate.logs import default_instance_id
    from mongogate.requests import new_request_id
    from mongogate.tools.base import error_text

    request_id = new_request_id()
    audit = unwritten_audit(settings, instance=settings.server.instance_id or default_instance_id())
    common = {"tool": spec.name, "tenant": args.tenant, "principal": args.sub, "request_id": request_id}
    report: dict[str, Any] = {"tool": spec.name, "kind": spec.kind, "tenant": args.tenant, "allowed": False}
    if spec.required_scopes:
        report["required_scopes"] = list(spec.required_scopes)
    event: dict[str, Any] | None = None
    if not isinstance(arguments, dict):  # the SDK refuses it before any mongogate code runs
        report["refusal"] = "JSON-RPC error -32602 (invalid params): the arguments must be a JSON object"
        event = audit.rejection_event(reason="invalid_params", path="arguments", filter=arguments, **common)
    else:
        try:
            report["command"] = plan(settings, spec, arguments, args.tenant)
            report["allowed"] = True
        except PolicyViolation as e:
            report["refusal"] = error_text(e, request_id)
            event = rejection(audit, spec, arguments, common, e.reason, e.path)
        except MongogateError as e:  # the argument bounds, before any policy work
            report["refusal"] = error_text(e, request_id)
            event = audit.rejection_event(
                reason=e.code,
                path=e.path or "arguments",
                filter=arguments,
                root="",
                allowed=allowed_names(spec),
                **common,
            )
        if report["allowed"] and args.execute:
            report["result"] = await execute(settings, registry, spec, arguments, args.tenant, args.demo)
    if event is not None:
        event.setdefault("instance", audit.instance)
    report["audit_event"] = event
    if event is not None and args.audit:
        await write_event(settings, event)
        report["audit_written"] = True
    return report


def plan(settings: Settings, spec: QueryToolSpec, arguments: dict[str, Any], tenant: str) -> dict[str, Any]:
    """The command a call with ``arguments`` sends: the same bounds, walk and scoping as the tool."""
    from mongogate.policy import prepare, prepare_pipeline
    from mongogate.tools.bounds import check_arguments, key_caps_from_schema
    from mongogate.tools.query_tools import query_tool

    tool = query_tool(spec, settings)
    check_arguments(arguments, settings.limits, key_caps=key_caps_from_schema(tool.parameters))
    if isinstance(spec, AggregateToolSpec):
        p = prepare_pipeline(spec, arguments, tenant, settings.policy)
        out: dict[str, Any] = {
            "aggregate": spec.collection,
            "pipeline": p.pipeline,
            "maxTimeMS": spec.max_time_ms,
            "allowDiskUse": False,
        }
        if (hint := p.scope.hint) is not None:
            out["hint"] = hint
        if p.probe is not None:
            out["then, unless the answer already shows more than max_groups groups"] = {"pipeline": p.probe}
        return out
    q = prepare(spec, arguments, tenant, settings.policy)
    find: dict[str, Any] = {
        "find": spec.collection,
        "filter": q.filter,
        "projection": q.projection,
        "sort": dict(q.sort) if q.sort else None,
        "limit": q.limit + 1,  # one more than returned: it tells `truncated`
        "maxTimeMS": spec.max_time_ms,
        "hint": q.scope.hint,
    }
    find = {k: v for k, v in find.items() if v is not None}
    if q.count:
        find["then count"] = {"filter": q.filter, "limit": settings.policy.max_count + 1}
    return find


def rejection(
    audit: Any, spec: QueryToolSpec, raw: dict[str, Any], common: dict[str, Any], reason: str, path: str
) -> dict[str, Any]:
    """The event tools/query_tools.py writes for this refusal."""
    from mongogate.audit import allowed_names

    logged_filter = spec.kind == "find" and "filter" in raw
    event: dict[str, Any] = audit.rejection_event(
        reason=reason,
        path=path,
        filter=raw.get("filter", raw) if logged_filter else raw,
        allowed=allowed_names(spec),
        scan=raw,
        root="",
        **common,
    )
    return event


async def execute(
    settings: Settings, registry: Any, spec: QueryToolSpec, arguments: dict[str, Any], tenant: str, demo: bool
) -> dict[str, Any]:
    """Run it as the tool would (the query connection), with the demo data seeded under ``--demo``."""
    from mongogate.db import Database
    from mongogate.policy import run_pipeline, run_query
    from mongogate.tools.base import error_text

    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        if demo:
            await _seed(settings, db, registry)
        coll = db.query[spec.collection]
        try:
            if isinstance(spec, AggregateToolSpec):
                result = await run_pipeline(coll, spec, arguments, tenant, settings.policy)
            else:
                result = await run_query(coll, spec, arguments, tenant, settings.policy)
        except MongogateError as e:
            return {"error": error_text(e)}
        return result.as_dict()
    finally:
        await db.close()


async def _seed(settings: Settings, db: Any, registry: Any) -> None:
    from mongogate.assembly import build_services
    from mongogate.demo import seed_demo

    if seed_demo not in registry.startup_hooks:
        return
    # no caller, an audit log that is never written (the seed only inserts orders), and the
    # embedder loads lazily: the seed never uses it
    await seed_demo(build_services(settings, db))


async def write_event(settings: Settings, event: dict[str, Any]) -> None:
    """``--audit``: the event goes where the server's would (the file, or the collection too)."""
    from mongogate.audit import audit_from_settings

    uri = settings.database.uri
    if settings.audit.sink != "file" and uri is None:
        from mongogate.engine import client as engine_client

        lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
        uri = lease.uri
        lease.release()
    audit = audit_from_settings(settings, uri, event.get("instance"))
    audit.write(dict(event))
    await anyio.to_thread.run_sync(audit.close)


def _extended_json(value: object, indent: int | None = 2) -> str:
    """MongoDB Extended JSON (relaxed): a date in a filter shows as ``{"$date": ...}``, not as text."""
    from bson import json_util

    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS, indent=indent)


def _print_report(report: dict[str, Any]) -> None:
    show = _extended_json

    print(f"tool {report['tool']} ({report['kind']}) for tenant {json.dumps(report['tenant'])}")
    if report.get("required_scopes"):
        print(f"  (callers need the scopes {', '.join(report['required_scopes'])}; not checked here)")
    if report["allowed"]:
        print("allowed; the database receives:")
        print(show(report["command"]))
        if "result" in report:
            print("result:")
            print(show(report["result"]))
    else:
        print("refused; the model reads:")
        print(f"  {report['refusal']}")
    event = report["audit_event"]
    if event is None:
        print("audit event: none (a call that runs is audited only with audit.log_queries)")
        return
    state = "written" if report.get("audit_written") else "not written; --audit writes it"
    print(f"audit event it writes ({state}):")
    print(show(event))
    sys.stdout.flush()


def register(sub: Any, with_config: Any) -> None:
    t = with_config(
        sub.add_parser("try", help="dry-run a query tool's policy on given arguments (no MCP, no audit)")
    )
    t.add_argument("tool", help="the query tool's name")
    t.add_argument("--tenant", required=True, help="the caller's tenant (as a token would carry it)")
    t.add_argument("--args", required=True, help="the tool's arguments as JSON, e.g. '{\"filter\": {}}'")
    t.add_argument("--sub", default=DEFAULT_SUBJECT, help="the caller's subject, shown in the audit event")
    t.add_argument("--demo", action="store_true", help="the demo tools too (as serve --demo)")
    t.add_argument("--execute", action="store_true", help="also run it and print the result")
    t.add_argument("--audit", action="store_true", help="write the audit event a refusal leaves")
    t.add_argument("--json", action="store_true", help="one JSON object instead of text")
    t.set_defaults(func=cmd_try)
