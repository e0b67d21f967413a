from mongogate.policy.aggregate_exprs import FORBIDDEN_EXPRESSIONS, FORBIDDEN_STAGES
from mongogate.policy.aggregate_run import prepare_pipeline, run_pipeline
from mongogate.policy.aggregate_schema import aggregate_input_schema, aggregate_output_schema
from mongogate.policy.execute import QueryResult, prepare, run_query
from mongogate.policy.paths import key_path, seg
from mongogate.policy.query_indexes import index_status, missing_report
from mongogate.policy.render import Renderer, encode, to_json
from mongogate.policy.sampling import SENSITIVE, FieldStats, drift, field_stats, missing_tenant, sample
from mongogate.policy.schema import input_schema, output_schema

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
