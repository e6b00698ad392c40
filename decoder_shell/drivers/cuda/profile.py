"""`shell replay --breakdown` on the cuda driver: one epoch timed kernel by kernel.

The session's kernels (the same launches, arguments and buffers as its graph) are captured from its
stream into a graph with an external event record node after every kernel, launched once, and each
kernel's time is the elapsed time between its two event nodes. In that graph the kernels run one
after another in launch order (no programmatic edges, emulated ranks serialized on one stream), so
the per-node times add up to more than a graph epoch: they say where time goes, the graph epochs
say how long the cycle takes.
"""

from __future__ import annotations

from ..base import device_hung

HOW = ("cuda driver, one epoch captured as a graph with an event node after every kernel "
       "(kernels serialized in launch order, no PDL edges)")


def profile_epoch(session) -> list[tuple[int | None, str, float]]:
    """(command index or None, kernel name, ms) of every kernel of one epoch, in launch order."""
    cu, raw, g = session.cu, session.cu.bindings, session.graph
    session.profile_how = HOW
    launches = list(g.eager)
    commands = list(g.commands)
    if len(commands) != len(launches):
        raise RuntimeError(f"{len(launches)} kernels but {len(commands)} command tags: graph build out of step")
    names = {id(f): name for name, f in session.modules.funcs.items()}
    external = raw.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL
    events = [cu.cuEventCreate(0) for _ in range(len(launches) + 1)]
    graph = exe = None
    try:
        cu.cuStreamBeginCapture(session.stream, raw.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        try:
            cu.cuEventRecordWithFlags(events[0], session.stream, external)
            for i, ln in enumerate(launches):
                cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, session.stream, ln.params_ptr, 0)
                cu.cuEventRecordWithFlags(events[i + 1], session.stream, external)
        finally:
            graph = cu.cuStreamEndCapture(session.stream)
        exe = cu.cuGraphInstantiate(graph, 0)
        cu.cuGraphLaunch(exe, session.stream)
        session.finish("the profiled epoch")
        times = [float(cu.cuEventElapsedTime(events[i], events[i + 1])) for i in range(len(launches))]
    finally:
        if device_hung():  # the graph still runs: destroying it would wait for ever
            exe = graph = None
            events = []
        if exe is not None:
            cu.cuGraphExecDestroy(exe)
        if graph is not None:
            cu.cuGraphDestroy(graph)
        for ev in events:
            cu.cuEventDestroy(ev)
    return [(cmd, names.get(id(ln.func), "kernel"), t) for cmd, ln, t in zip(commands, launches, times)]
