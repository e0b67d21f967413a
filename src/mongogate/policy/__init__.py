"""The query policy: what a query tool's call may do, decided by one walk, and how its result is
rendered.

What a started server needs before it answers (the schemas a query tool publishes, its renderer,
the names the audit forbids, the declared-index check) is imported with the package; the walk that
runs a call (`execute`, `aggregate_run` and what they use) and the sampling of `mongogate spec` and
`check` are imported at their first read (`lazy.lazy_exports`): about 6 ms of a `serve`'s start-up
(benchmarks/startup.py; tests/test_lazy.py pins it).
"""

from typing import TYPE_CHECKING

from mongogate.lazy import lazy_exports
from mongogate.policy.aggregate_exprs import FORBIDDEN_EXPRESSIONS, FORBIDDEN_STAGES
from mongogate.policy.aggregate_schema import aggregate_input_schema, aggregate_output_schema
from mongogate.policy.paths import key_path, seg
from mongogate.policy.query_indexes import index_status, missing_report
from mongogate.policy.render import Renderer, encode, to_json
from mongogate.policy.schema import input_schema, output_schema

if TYPE_CHECKING:
    from mongogate.policy.aggregate_run import prepare_pipeline, run_pipeline
    from mongogate.policy.execute import QueryResult, prepare, run_query
    from mongogate.policy.sampling import SENSITIVE, FieldStats, drift, field_stats, missing_tenant, sample
else:
    #: what a call runs, and `spec`/`check` sample: imported at the first read
    _LAZY = {
        **dict.fromkeys(("prepare_pipeline", "run_pipeline"), "mongogate.policy.aggregate_run"),
        **dict.fromkeys(("QueryResult", "prepare", "run_query"), "mongogate.policy.execute"),
        **dict.fromkeys(
            ("SENSITIVE", "FieldStats", "drift", "field_stats", "missing_tenant", "sample"),
            "mongogate.policy.sampling",
        ),
    }
    __getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "FORBIDDEN_EXPRESSIONS",
    "FORBIDDEN_STAGES",
    "SENSITIVE",
    "FieldStats",
    "QueryResult",
    "Renderer",
    "aggregate_input_schema",
    "aggregate_output_schema",
    "drift",
    "encode",
    "field_stats",
    "index_status",
    "input_schema",
    "key_path",
    "missing_report",
    "missing_tenant",
    "output_schema",
    "prepare",
    "prepare_pipeline",
    "run_pipeline",
    "run_query",
    "sample",
    "seg",
    "to_json",
]
