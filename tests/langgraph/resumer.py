"""A graph run in a process of its own, for the double-resume test (tests/langgraph/test_saver_fence.py).

    python -m tests.langgraph.resumer URI DB DATA_DIR THREAD EFFECTS BARRIER (start|resume)

The graph: `ask` interrupts for an approval, then `effect` appends one line to EFFECTS (the side
effect that must run once), writes BARRIER/started and waits until BARRIER/go exists. Exit code 3
and the error on stderr when the saver refuses the thread.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from mongogate.config import load_settings
from mongogate.errors import MongogateError
from mongogate.langgraph import MongogateSaver


class State(TypedDict, total=False):
    approved: str
    done: bool


def build(effects: Path, barrier: Path | None) -> Any:
    def ask(state: State) -> State:
        return {"approved": str(interrupt("approve the payment?"))}

    def effect(state: State) -> State:
        with effects.open("a") as f:
            f.write(f"paid {state['approved']}\n")
        if barrier is not None:
            (barrier / "started").write_text("1")
            while not (barrier / "go").exists():  # a barrier file the test creates, not a time margin
                time.sleep(0.01)
        return {"done": True}

    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_node("effect", effect)
    g.add_edge(START, "ask")
    g.add_edge("ask", "effect")
    g.add_edge("effect", END)
    return g


def main(argv: list[str]) -> int:
    uri, db, data_dir, thread, effects, barrier, mode = argv
    settings = load_settings(None, database={"uri": uri, "name": db}, server={"data_dir": data_dir})
    with MongogateSaver.open(settings, tenant="acme") as saver:
        graph = build(Path(effects), Path(barrier) if mode == "resume" else None).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": thread}}
        try:
            graph.invoke({} if mode == "start" else Command(resume="yes"), config)
        except MongogateError as e:
            print(f"[{e.code}] {e}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
