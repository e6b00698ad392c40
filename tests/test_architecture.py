"""One direction of imports (docs/ARCHITECTURE.md): every module's imports, read with ast (lazy imports
inside functions included), point to its own room or a lower one; torch only under capture/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "decoder_shell"
#: docs/ARCHITECTURE.md's table: room -> layer (a room may import rooms of a lower layer).
LAYERS = {"errors": 0, "atomic": 0, "data": 0, "about": 0, "progress": 0, "contracts": 1, "geometry": 2, "commands": 3, "corpus": 4, "drivers": 5, "replay": 6,
          "capture": 7, "cli": 8}
FRAMEWORKS = ("torch", "transformers")
FRAMEWORK_ROOMS = ("capture",)
#: Arrows the layers would allow but the rules forbid (docs/ARCHITECTURE.md: drivers know no corpus).
FORBIDDEN = {("drivers", "corpus")}


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file, wherever it stands."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                out += [(node.lineno, target + ("" if node.module else f".{a.name}")) for a in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "__import__", "import_module"):
            out.append((node.lineno, "<dynamic import>"))
    return out


def violations() -> list[str]:
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        src = module_name(path)
        room = room_of(src)
        for line, target in imports(path):
            where = f"{path.relative_to(PKG.parent)}:{line}"
            if target == "<dynamic import>":
                bad.append(f"{where}: imports by name (import it plainly)")
                continue
            top = target.split(".")[0]
            if top in FRAMEWORKS and room not in FRAMEWORK_ROOMS:
                bad.append(f"{where}: {target} outside {', '.join(FRAMEWORK_ROOMS)}/")
            if top != "decoder_shell" or room == "__init__":
                continue
            other = room_of(target)
            if other == "__init__" and target == "decoder_shell":
                bad.append(f"{where}: imports the package root")
            elif (room, other) in FORBIDDEN:
                bad.append(f"{where}: {room} -> {other} is forbidden")
            elif other != room and LAYERS[other] >= LAYERS[room]:
                bad.append(f"{where}: {room} -> {other} points up (layer {LAYERS[room]} -> {LAYERS[other]})")
    return bad


def test_every_room_is_in_the_table():
    rooms = {p.stem if p.is_file() else p.name for p in PKG.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.stem != "__init__")}
    assert rooms == set(LAYERS), (f"rooms {sorted(rooms ^ set(LAYERS))}: a new room gets its layer in "
                                  f"docs/ARCHITECTURE.md's table and in LAYERS here")


def test_imports_point_down():
    bad = violations()
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source,target,ok", [("commands", "corpus", False), ("corpus", "replay", False),
                                               ("replay", "corpus", True), ("contracts", "geometry", False)])
def test_the_rule_itself(tmp_path, source, target, ok):
    """The checker flags an upward arrow in a lazy import and passes a downward one."""
    global PKG
    pkg = tmp_path / "decoder_shell"
    for room in LAYERS:
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / source / "m.py").write_text(f"def f():\n    from ..{target} import x\n")
    saved, PKG = PKG, pkg
    try:
        assert (violations() == []) is ok
    finally:
        PKG = saved
