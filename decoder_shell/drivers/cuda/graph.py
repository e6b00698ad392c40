"""The cycle as one CUDA graph, node by node, plus the same launches in order for eager epochs.

Edges follow the decode's order, not buffer accesses: the cycle's all-reduce inputs are injected
(nothing in the cycle writes them), so edges derived from reads and writes would let every rank's
boundaries run at once, which is not the cycle being measured. The order is instead three rules,
all here: (1) each rank is a chain (every node after the rank's previous node); (2) a collective
joins the chains (emulated ranks: a rank's all-reduce node waits for every rank's previous node,
since it reads every rank's partial sums; one process per rank waits in the kernel, through the
arrival slots); (3) a Sinkhorn node runs beside the next all-reduce and the rank's next mHC node
waits for it (it reads the post and comb the Sinkhorn node writes).
"""

from __future__ import annotations

import numpy as np

from ...commands.program import elided_by
from ...contracts.allreduce import RingContract
from ...geometry import DENSE_OPS, MOE_OPS
from . import args as A
from .variants import BASELINE, Node, Variant


class Graph:
    """cuGraph nodes and the eager launch list of one session; destroy() frees what was made."""

    def __init__(self, cu, pdl: bool):
        self.cu, self.pdl = cu, pdl
        self.graph = self.exec = None
        self.events: list = []
        self.launches: list[A.Launch] = []
        self.eager: list[A.Launch] = []
        self.commands: list[int | None] = []  # the command each launch serves (replay --breakdown)
        self.building: int | None = None
        self.pdl_nodes: set[int] = set()

    def start(self, local: list[int]) -> None:
        """Create the graph and the timing events (recorded for destroy() as each is made)."""
        self.graph = self.cu.cuGraphCreate(0)
        self.ev_start = {r: self._event() for r in local}
        self.ev_end = {r: self._event() for r in local}
        self.eager_start, self.eager_end = self._event(), self._event()

    def _event(self):
        ev = self.cu.cuEventCreate(0)
        self.events.append(ev)
        return ev

    def kernel(self, launch: A.Launch, deps: list):
        """A kernel node after `deps`; edges between two kernels that wait properly are programmatic."""
        cu = self.cu.bindings
        p = cu.CUDA_KERNEL_NODE_PARAMS()
        p.func = launch.func
        p.gridDimX, p.gridDimY, p.gridDimZ = launch.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = launch.block
        p.sharedMemBytes = launch.shared
        p.kernelParams = launch.params_ptr
        self.launches.append(launch)
        self.eager.append(launch)
        self.commands.append(self.building)
        early = self.pdl and launch.pdl and all(int(d) in self.pdl_nodes for d in deps)
        if not early:
            node = self.cu.cuGraphAddKernelNode(self.graph, deps, len(deps), p)
        else:
            node = self.cu.cuGraphAddKernelNode(self.graph, [], 0, p)
            edge = cu.CUgraphEdgeData()
            edge.from_port = cu.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            edge.type = cu.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
            self.cu.cuGraphAddDependencies(self.graph, deps, [node] * len(deps), [edge] * len(deps), len(deps))
        if launch.pdl:
            self.pdl_nodes.add(int(node))
        return node

    def record(self, event, deps: list):
        return self.cu.cuGraphAddEventRecordNode(self.graph, deps, len(deps), event)

    def instantiate(self) -> None:
        self.exec = self.cu.cuGraphInstantiate(self.graph, 0)

    def destroy(self) -> None:
        if self.exec is not None:
            self.cu.cuGraphExecDestroy(self.exec)
            self.exec = None
        if self.graph is not None:
            self.cu.cuGraphDestroy(self.graph)
            self.graph = None
        while self.events:
            self.cu.cuEventDestroy(self.events.pop())


def build(g: Graph, cycle, variants: dict, bind, local: list[int], rank: int | None) -> None:
    """Add every command's nodes to `g` under the three rules above, then instantiate."""
    g.start(local)
    last = {r: g.record(g.ev_start[r], []) for r in local}

    def joined(r: int) -> list:  # rule 2
        return list(last.values()) if rank is None else [last[r]]

    if rank is not None:  # the epoch that tags this cycle's arrivals
        last[rank] = g.kernel(bind.epoch(rank), [last[rank]])
    cmds = cycle.commands
    fused_away = {i - 1 for i, v in variants.items() if isinstance(v, Variant) and v.fused}
    # the `fused` combine candidate: the official chain's two all-reduces do not run
    fused_away |= elided_by(cycle, {i: v.name for i, v in variants.items() if isinstance(v, Variant)})
    pending: dict[int, list] = {}  # rank -> its Sinkhorn node, joined by the rank's next mHC node (rule 3)
    for cmd in cmds:
        g.building = cmd.index
        v = variants.get(cmd.index, BASELINE)
        if cmd.index in fused_away or (isinstance(v, Variant) and v.node is Node.NONE):
            continue
        if cmd.op == "allreduce" and isinstance(v, Variant) and v.node is Node.OWN:
            last = _allreduce(g, cycle, cmd, v, bind, last, joined)
            continue
        if cmd.op == "moe_combine_official" and isinstance(v, Variant) and v.name == "fused":
            launches = {r: bind.fused_combine(cmd, r) for r in local}
            comb = {r: g.kernel(launches[r][0], [last[r]]) for r in local}
            ar = {r: g.kernel(launches[r][1], list(comb.values()) if rank is None else [comb[r]]) for r in local}
            last = {r: g.kernel(launches[r][2], [ar[r]]) for r in local}
            continue
        if cmd.op in MOE_OPS and isinstance(v, Variant) and v.node is Node.OWN:
            last = {r: _chain(g, bind.moe(cmd, r, v), [last[r]]) for r in local}
            continue
        if cmd.op in DENSE_OPS and isinstance(v, Variant) and v.node is Node.OWN:
            last = {r: _chain(g, bind.dense(cmd, r, v), [last[r]]) for r in local}
            continue
        new = {}
        for r in local:
            if not isinstance(v, Variant):
                ln = bind.user(cmd, r, v)
            elif v.node is Node.COPY:
                ln = bind.copy(cmd, r)
            elif v.node is Node.EMPTY:
                ln = bind.empty()
            else:
                ln = bind.mhc(cmd, r, v, cmds[cmd.index - 1] if v.fused else None)
            if cmd.op == "allreduce":
                deps = joined(r)
            else:
                deps = (list(last.values()) if isinstance(v, Variant) and v.fused else [last[r]]) + pending.pop(r, [])
            new[r] = g.kernel(ln, deps)
            if isinstance(ln.args[0], A.MhcArgs) and ln.args[0].split_sinkhorn:
                pending[r] = [g.kernel(bind.sinkhorn(ln), [new[r]])]
            if isinstance(ln.args[0], A.MhcArgs) and "norm_weight" in cmd.inputs:  # fused_norm: y in place
                new[r] = g.kernel(bind.rmsnorm(cmd, r), [new[r], *pending.get(r, [])])
        last = new
    for r in local:
        g.record(g.ev_end[r], [last[r], *pending.pop(r, [])])
    g.instantiate()


def _chain(g: Graph, launches: list, deps: list):
    """A command of several kernels (the MoE expert commands) as a chain of nodes; returns the last."""
    for ln in launches:
        deps = [g.kernel(ln, deps)]
    return deps[0]


def _allreduce(g: Graph, cycle, cmd, v: Variant, bind, last: dict, joined) -> dict:
    n = int(np.prod(cycle.buffers[cmd.inputs["x"]].shape))
    contract = cycle.contract
    if v.ring:  # reduce-scatter nodes, joined, then all-gather nodes
        rs = {r: g.kernel(bind.allreduce(cmd, r, 1, contract, 0, n), list(last.values())) for r in last}
        return {r: g.kernel(bind.allreduce(cmd, r, 2, contract, 0, n), list(rs.values())) for r in last}
    pieces = [(0, n)]
    if v.segments > 1:
        k = v.segments
        contract = RingContract(**{**contract.to_json(), "segments": k})
        size = -(-n // k)
        pieces = [(s * size, min(n, (s + 1) * size)) for s in range(k) if s * size < n]
    new = {}
    for r in last:
        deps = joined(r)
        for piece, (lo, hi) in enumerate(pieces):
            deps = [g.kernel(bind.allreduce(cmd, r, 0, contract, lo, hi, piece), deps)]
        new[r] = deps[0]
    return new
