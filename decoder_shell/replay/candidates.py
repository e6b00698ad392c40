"""What a gate swaps: op selectors resolved to command indices, and candidate implementations.

A candidate is either a name the driver knows (passed through untouched: the driver decides what it
offers and raises UsageError for names it does not know) or a user kernel described by a small JSON
spec (`OP=@spec.json`), parsed here into a KernelCandidate so that every driver gets a validated,
self-contained description (code bytes included) instead of a path to re-read.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from ..commands import ops
from ..commands.program import CONTRACT_VARIANTS, Cycle, elided_by
from ..errors import UsageError
from ..geometry import DENSE_OPS, DENSE_PROJECTIONS, MOE_OPS

MHC_OPS = ("mhc_pre", "mhc_post_pre", "mhc_post_head")
OPS = ("allreduce", *MHC_OPS, *MOE_OPS, *DENSE_OPS)
#: Selector words -> the ops they select.
GROUPS = {**{op: (op,) for op in OPS}, "mhc": MHC_OPS, "collectives": ("allreduce",), "moe": MOE_OPS,
          "experts": ("moe_routed", "moe_shared"), "combine": ("moe_combine", "moe_combine_official"),
          "dense": DENSE_OPS, "projections": DENSE_PROJECTIONS,
          "cycle": OPS}
_BOUNDARY = re.compile(r"^[a-z]+\.\d{4}\.[a-z_]+$")


# --- selectors -----------------------------------------------------------------------------------
def select(cycle: Cycle, selector: str) -> tuple[int, ...]:
    """Command indices a selector names: `op`, `mhc`, `collectives`, `phase:word`, or a boundary name."""
    text = selector.strip()
    by_name = {c.boundary.name: c.index for c in cycle.commands}
    if text in by_name:
        return (by_name[text],)
    phase, _, word = text.rpartition(":")
    phases = [p.name for p in cycle.geometry.phases]
    if phase and phase not in phases:
        raise UsageError(f"selector {selector!r}: this cycle has no phase {phase!r} (phases: {', '.join(phases)})")
    if word not in GROUPS:
        if _BOUNDARY.match(word):
            names = list(by_name)
            raise UsageError(f"selector {selector!r}: no boundary {word!r} in this cycle "
                             f"({names[0]} .. {names[-1]})")
        raise UsageError(f"selector {selector!r}: expected an op ({', '.join(OPS)}), 'mhc', 'collectives', 'moe', 'experts', 'combine' or "
                         f"'cycle', "
                         f"optionally phase-qualified (verify:mhc), or a boundary name such as "
                         f"{cycle.commands[-1].boundary.name}")
    picked = tuple(c.index for c in cycle.commands
                   if c.op in GROUPS[word] and (not phase or c.boundary.phase == phase))
    if not picked:
        raise UsageError(f"selector {selector!r} selects no command of this cycle")
    return picked


# --- kernel candidates ---------------------------------------------------------------------------
SOURCE_LANGUAGES = {".cu": "cuda", ".cl": "opencl"}
BINARY_FORMATS = {".cubin": "cubin", ".ptx": "ptx", ".fatbin": "fatbin", ".spv": "spirv"}
#: What some driver can run (the cuda driver: CUDA C through NVRTC, cubin/fatbin/PTX as they are). A spec
#: in any other language is refused when it is read, not after a corpus and a driver were loaded.
RUNNABLE = {("source", "cuda"), ("binary", "cubin"), ("binary", "ptx"), ("binary", "fatbin")}
#: Scalar arguments a spec may bind by name.
SCALARS = {"rows": "rows M of the command's phase", "hidden": "hidden size D", "hc": "residual streams HC",
           "ranks": "TP ranks R", "rank": "this rank's index"}
#: Literal arguments `type:value`, with their ranges.
LITERALS = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-2**63, 2**63 - 1), "u64": (0, 2**64 - 1),
            "f32": None}
#: Tensor bindings: `in:T`, `param:T`, `out:T` (this rank's buffer of the op's tensor T, with that
#: role) and `peers:T` (a device array of R pointers to tensor T on every rank, for collectives).
TENSOR_ROLES = {"in": "input", "param": "param", "out": "output", "peers": None}
SPEC_KEYS = {"name", "op", "source", "binary", "language", "format", "entry", "grid", "block", "shared_bytes",
             "args", "options"}
MAX_SPEC_BYTES = 1 << 20
MAX_CODE_BYTES = 64 << 20


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument: a tensor binding, a named scalar, or a literal."""

    kind: str  # "in" | "param" | "out" | "peers" | "scalar" | one of LITERALS
    name: str  # tensor or scalar name; for a literal, its text
    value: int | float | None = None  # a literal's value

    @property
    def text(self) -> str:
        return self.name if self.kind == "scalar" else f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class KernelCandidate:
    """A user kernel for one op: code, entry point, launch geometry and argument bindings."""

    name: str
    spec: str  # the spec file it came from
    code_path: str
    kind: str  # "source" | "binary"
    language: str  # source: "cuda" | "opencl"; binary: "cubin" | "ptx" | "fatbin" | "spirv"
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[KernelArg, ...]
    options: tuple[str, ...] = ()
    op: str | None = None
    code: bytes = field(default=b"", repr=False)

    @property
    def digest(self) -> str:
        return blake3.blake3(self.code).hexdigest()

    def __str__(self) -> str:
        return f"@{self.spec}"

    def to_json(self) -> dict:
        return {"name": self.name, "spec": self.spec, "code_path": self.code_path, "kind": self.kind,
                "language": self.language, "code_blake3": self.digest, "code_bytes": len(self.code),
                "entry": self.entry, "grid": list(self.grid), "block": list(self.block),
                "shared_bytes": self.shared_bytes, "args": [a.text for a in self.args],
                "options": list(self.options), "op": self.op}

    def check_binding(self, cycle: Cycle, indices) -> None:
        """Every tensor argument must name a tensor, with that role, of every selected command's op."""
        for i in indices:
            cmd = cycle.commands[i]
            if self.op and cmd.op != self.op:
                raise UsageError(f"{self.spec}: kernel is for {self.op}, but the selection includes "
                                 f"{cmd.boundary.name}")
            roles = {t.name: t.role for t in ops.op_tensors(cmd.boundary, cycle.geometry)}
            for a in self.args:
                if a.kind not in TENSOR_ROLES:
                    continue
                want = TENSOR_ROLES[a.kind]
                if a.name not in roles or (want and roles[a.name] != want):
                    have = ", ".join(f"{_ROLE_PREFIX[r]}:{n}" for n, r in roles.items())
                    raise UsageError(f"{self.spec}: argument {a.text!r} does not bind to {cmd.op} "
                                     f"({cmd.boundary.name} has {have})")


_ROLE_PREFIX = {"input": "in", "param": "param", "output": "out"}


def load_kernel_spec(path: Path) -> KernelCandidate:
    """Parse and validate a kernel candidate spec; every problem is one UsageError naming the file."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise UsageError(f"{path}: spec file is larger than {MAX_SPEC_BYTES} bytes")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such candidate spec file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read candidate spec ({e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    return parse_kernel_spec(raw, path)


def parse_kernel_spec(raw, path: Path) -> KernelCandidate:
    def bad(msg):
        return UsageError(f"{path}: {msg}")

    if not isinstance(raw, dict):
        raise bad("a candidate spec is a JSON object")
    unknown = sorted(set(raw) - SPEC_KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(SPEC_KEYS))}")
    if ("source" in raw) == ("binary" in raw):
        raise bad("give exactly one of 'source' (CUDA C or OpenCL C) or 'binary' (cubin, ptx, fatbin, spv)")
    kind = "source" if "source" in raw else "binary"
    rel = raw[kind]
    if not isinstance(rel, str) or not rel:
        raise bad(f"'{kind}' must be a file path")
    code_path = (path.parent / rel).resolve()
    key, table = ("language", SOURCE_LANGUAGES) if kind == "source" else ("format", BINARY_FORMATS)
    language = raw.get(key, table.get(code_path.suffix))
    if language not in table.values():
        raise bad(f"cannot tell the {key} of {rel!r}: set '{key}' to one of {', '.join(table.values())}")
    if (kind, language) not in RUNNABLE:
        raise bad(f"no driver runs {language} {kind}s (the cuda driver runs CUDA C sources and cubin, fatbin "
                  f"and PTX binaries)")
    try:
        if code_path.stat().st_size > MAX_CODE_BYTES:
            raise bad(f"{rel} is larger than {MAX_CODE_BYTES} bytes")
        code = code_path.read_bytes()
    except OSError as e:
        raise bad(f"cannot read {kind} {rel!r} ({e.strerror or e})") from None
    if kind == "source":
        try:
            code.decode("utf-8")
        except UnicodeDecodeError:
            raise bad(f"source {rel!r} is not UTF-8 text (a binary? use 'binary')") from None
    entry = raw.get("entry")
    if not isinstance(entry, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", entry):
        raise bad("'entry' must be the kernel's name (a C identifier)")
    grid = _dims(raw.get("grid"), "grid", bad)
    block = _dims(raw.get("block"), "block", bad)
    if math.prod(block) > 1024:
        raise bad(f"block {list(block)} has {math.prod(block)} threads; at most 1024")
    shared = raw.get("shared_bytes", 0)
    if not isinstance(shared, int) or isinstance(shared, bool) or not 0 <= shared <= 1 << 30:
        raise bad("'shared_bytes' must be a non-negative integer")
    args = raw.get("args")
    if not isinstance(args, list) or not args:
        raise bad("'args' must be a non-empty list such as [\"in:x\", \"param:fn\", \"out:y\", \"rows\"]")
    options = raw.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise bad("'options' must be a list of compiler option strings")
    op = raw.get("op")
    if op is not None and op not in OPS:
        raise bad(f"'op' must be one of {', '.join(OPS)}")
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise bad("'name' must be a non-empty string")
    return KernelCandidate(name=name, spec=str(path), code_path=str(code_path), kind=kind, language=language,
                           entry=entry, grid=grid, block=block, shared_bytes=shared,
                           args=tuple(_arg(a, bad) for a in args), options=tuple(options), op=op, code=code)


def _dims(v, key, bad) -> tuple[int, int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if (not isinstance(v, list) or not 1 <= len(v) <= 3
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)):
        raise bad(f"'{key}' must be 1 to 3 positive integers, e.g. [4, 1, 1]")
    return tuple(v + [1] * (3 - len(v)))


def _arg(a, bad) -> KernelArg:
    if not isinstance(a, str):
        raise bad(f"argument {a!r} must be a string")
    if a in SCALARS:
        return KernelArg("scalar", a)
    kind, sep, rest = a.partition(":")
    if not sep or not rest:
        raise bad(f"argument {a!r}: expected in:T, param:T, out:T, peers:T, a scalar "
                  f"({', '.join(SCALARS)}) or a literal such as i32:7")
    if kind in TENSOR_ROLES:
        if not re.fullmatch(r"[a-z_]+", rest):
            raise bad(f"argument {a!r}: {rest!r} is not a tensor name")
        return KernelArg(kind, rest)
    if kind not in LITERALS:
        raise bad(f"argument {a!r}: unknown kind {kind!r} (in, param, out, peers, {', '.join(LITERALS)})")
    try:
        value = float(rest) if kind == "f32" else int(rest, 0)
    except ValueError:
        raise bad(f"argument {a!r}: {rest!r} is not a {kind} value") from None
    rng = LITERALS[kind]
    if rng and not rng[0] <= value <= rng[1]:
        raise bad(f"argument {a!r}: out of range for {kind}")
    if kind == "f32" and not math.isfinite(value):
        raise bad(f"argument {a!r}: not a finite number")
    return KernelArg(kind, rest, value)


# --- the plan a gate runs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One user request: the commands a selector names, and what replaces them."""

    selector: str
    impl: str  # as given: a variant name or @spec.json
    variant: object  # str, or KernelCandidate
    commands: tuple[int, ...]
    deletion: bool

    def to_json(self, cycle: Cycle) -> dict:
        v = self.variant.to_json() if isinstance(self.variant, KernelCandidate) else self.variant
        return {"selector": self.selector, "impl": self.impl, "variant": v, "deletion": self.deletion,
                "commands": len(self.commands),
                "boundaries": [cycle.commands[i].boundary.name for i in self.commands]}


@dataclass(frozen=True)
class Plan:
    changes: tuple[Change, ...]

    @property
    def variants(self) -> dict:
        """Command index -> variant, what Driver.load takes."""
        return {i: c.variant for c in self.changes for i in c.commands}

    @property
    def contract_change(self) -> bool:
        """A candidate that computes a different contract (the fused MoE combine on an official
        corpus): its mismatches are measured and reported, never called exact."""
        return any(isinstance(c.variant, str) and c.variant in CONTRACT_VARIANTS for c in self.changes)

    def elided_outputs(self, cycle: Cycle) -> frozenset[int]:
        """Output buffers the candidate does not compute (the official chain's all-reduces under the
        fused combine): left out of its comparison, since nothing of them exists in its contract."""
        return frozenset(b for i in elided_by(cycle, self.variants) for b in cycle.commands[i].outputs.values())

    @property
    def deletion(self) -> bool:
        """A deletion-only bound: exactness is not asked of it."""
        return any(c.deletion for c in self.changes)


def parse_candidate(text: str) -> tuple[str, str]:
    sel, sep, impl = text.partition("=")
    if not sep or not sel.strip() or not impl.strip():
        raise UsageError(f"--candidate {text!r}: expected OP=IMPL, e.g. mhc_post_pre=fused-m2 or mhc=@spec.json")
    return sel.strip(), impl.strip()


def make_plan(cycle: Cycle, candidates=(), deletes=(), delete_mode: str = "delete") -> Plan:
    """Resolve --candidate and --delete arguments; a command named twice is a usage error."""
    if delete_mode not in ("delete", "copy"):
        raise UsageError(f"--delete-mode must be delete or copy, not {delete_mode!r}")
    if not candidates and not deletes:
        raise UsageError("nothing to gate: give --candidate OP=IMPL or --delete OP")
    changes = []
    for text in candidates:
        sel, impl = parse_candidate(text)
        idx = select(cycle, sel)
        if impl.startswith("@"):
            variant = load_kernel_spec(Path(impl[1:]))
            variant.check_binding(cycle, idx)
        else:
            variant = impl
        changes.append(Change(sel, impl, variant, idx, False))
    for sel in deletes:
        changes.append(Change(sel, delete_mode, delete_mode, select(cycle, sel), True))
    owner: dict[int, Change] = {}
    for c in changes:
        for i in c.commands:
            if i in owner:
                raise UsageError(f"{cycle.commands[i].boundary.name} is selected twice "
                                 f"({owner[i].selector}={owner[i].impl} and {c.selector}={c.impl})")
            owner[i] = c
    return Plan(tuple(changes))
