"""Every forbidden operator and stage in a refused call, whatever the logged copy leaves out.

The policy walk stops at the first violation, and the logged copy of the filter is trimmed
(50 keys per object, 12 levels, 500 values): a ``$where`` behind an unknown field, past the
50th key or in a later pipeline stage was in neither. This walk looks at the whole argument
as received, iteratively (no recursion limit), within a node budget, and lists each ``$`` key
the tool never allows: name (escaped, shortened), where it first appears, how often. The
list is bounded; what it leaves out is counted, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from mongogate.policy import FORBIDDEN_EXPRESSIONS, FORBIDDEN_STAGES, key_path, seg
from mongogate.specs import (
    SUPPORTED_ACCUMULATORS,
    SUPPORTED_OPERATORS,
    SUPPORTED_STAGES,
    AggregateToolSpec,
    QueryToolSpec,
)

#: distinct names listed in one event (the rest are counted in ``forbidden_cut``)
MAX_NAMES = 32
#: nodes looked at in one argument (the HTTP body limits keep real ones far below this)
MAX_NODES = 2_000_000
_MAX_PATH = 512
#: expression operators the pipeline walk accepts inside a group key
_EXPRESSIONS = frozenset({"$dateTrunc"})

#: every name some tool could allow: what an event lists when it does not know the tool's spec
EVERYTHING_CHECKABLE: frozenset[str] = frozenset(
    {*SUPPORTED_OPERATORS, *SUPPORTED_STAGES, *SUPPORTED_ACCUMULATORS, *_EXPRESSIONS}
)

#: names MongoDB runs (query and expression operators, stages, accumulators): listed before any
#: made-up name, so 32 junk keys in front cannot push a ``$where`` out of the bounded list
MONGODB_NAMES: frozenset[str] = frozenset(
    {*FORBIDDEN_STAGES, *FORBIDDEN_EXPRESSIONS}
    | {
        "$all", "$elemMatch", "$size", "$type", "$regex", "$options", "$not", "$mod", "$text", "$search",
        "$jsonSchema", "$geoWithin", "$geoIntersects", "$near", "$nearSphere", "$bitsAllSet",
        "$bitsAnySet", "$bitsAllClear", "$bitsAnyClear", "$comment", "$meta", "$slice", "$natural",
        "$add", "$subtract", "$multiply", "$divide", "$concat", "$substr", "$substrCP", "$toString",
        "$toObjectId", "$convert", "$cond", "$ifNull", "$switch", "$arrayElemAt", "$objectToArray",
        "$arrayToObject", "$mergeObjects", "$getField", "$setField", "$unsetField", "$rand",
        "$sampleRate", "$toLower", "$toUpper", "$split", "$strLenCP", "$regexMatch", "$regexFind",
        "$regexFindAll", "$dateToString", "$dateFromString", "$dateAdd", "$dateDiff", "$push",
        "$addToSet", "$stdDevPop", "$stdDevSamp", "$top", "$bottom", "$topN", "$bottomN", "$firstN",
        "$lastN", "$maxN", "$minN", "$median", "$percentile", "$bucket", "$bucketAuto", "$out",
        "$listSearchIndexes", "$internalInhibitOptimization", "$queryStats", "$shardedDataDistribution",
    }
    | EVERYTHING_CHECKABLE
)  # fmt: skip


def allowed_names(spec: QueryToolSpec) -> frozenset[str]:
    """The ``$`` names ``spec`` accepts somewhere: its operators (and, for an aggregation tool,
    its stages, accumulators and ``$dateTrunc``). Any other ``$`` key is forbidden wherever it is."""
    if isinstance(spec, AggregateToolSpec):
        return frozenset({*spec.operators, *spec.stages, *spec.accumulators, *_EXPRESSIONS})
    return frozenset(spec.operators)


@dataclass
class _Found:
    name: str
    path: str
    count: int = 1


@dataclass
class Forbidden:
    """What the walk found: at most MAX_NAMES names in first-seen order, and what it left out."""

    names: list[_Found] = field(default_factory=list)
    #: distinct names beyond MAX_NAMES
    cut: int = 0
    #: the node budget ran out before the whole argument was seen
    partial: bool = False

    def as_fields(self) -> dict[str, Any]:
        """The event's fields: ``forbidden`` always (possibly empty), the counts only when non-zero."""
        out: dict[str, Any] = {
            "forbidden": [{"name": f.name, "path": f.path, "count": f.count} for f in self.names]
        }
        if self.cut:
            out["forbidden_cut"] = self.cut
        if self.partial:
            out["forbidden_partial"] = True
        return out


def find_forbidden(
    value: object,
    allowed: Collection[str] = EVERYTHING_CHECKABLE,
    *,
    root: str = "filter",
    max_names: int = MAX_NAMES,
    max_nodes: int = MAX_NODES,
) -> Forbidden:
    """Every ``$`` key of ``value`` (at any depth) that is not in ``allowed``.

    ``root`` names ``value`` in paths (``"filter"``; ``""`` for a tool's whole arguments, so
    paths read ``pipeline[2].$where``). Names are counted by their full text: two names that
    shorten to the same text stay two entries."""
    out = Forbidden()
    by_name: dict[str, _Found] = {}
    seen_names: set[str] = set()
    # (node, parent's rendered path or None when not rendered yet, parent entry, key)
    stack: list[tuple[object, _Loc]] = [(value, None)]
    nodes = 0
    while stack:
        node, loc = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            out.partial = True
            break
        if isinstance(node, dict):
            children: list[tuple[object, _Loc]] = []
            for k, v in node.items():
                here = (loc, k)
                if isinstance(k, str) and k.startswith("$") and k not in allowed:
                    hit = by_name.get(k)
                    if hit is not None:
                        hit.count += 1
                    elif k not in seen_names:
                        seen_names.add(k)
                        if len(by_name) >= max_names and k in MONGODB_NAMES:
                            _evict_made_up(by_name, out)  # a real operator outranks a made-up name
                        if len(by_name) < max_names:
                            by_name[k] = found = _Found(seg(k), _render(root, here))
                            out.names.append(found)
                        else:
                            out.cut += 1
                children.append((v, here))
            stack.extend(reversed(children))  # depth first, in document order
        elif isinstance(node, list | tuple):
            stack.extend((v, (loc, i)) for i, v in reversed(list(enumerate(node))))
    return out


def _evict_made_up(by_name: dict[str, _Found], out: Forbidden) -> None:
    """Drop the newest listed name MongoDB does not know (counted in ``cut``), if there is one."""
    for name in reversed(list(by_name)):
        if name not in MONGODB_NAMES:
            out.names.remove(by_name.pop(name))
            out.cut += 1
            return


#: a place in the argument: (parent place, key or index); None is the argument itself
_Loc = tuple[Any, object] | None


def _render(root: str, loc: _Loc) -> str:
    keys: list[object] = []
    while loc is not None:
        loc, key = loc
        keys.append(key)
    out = root
    for key in reversed(keys):
        out = f"{out}[{key}]" if type(key) is int else key_path(out, key)
        if len(out) > _MAX_PATH:
            return out[:_MAX_PATH] + "…"
    return out or root
