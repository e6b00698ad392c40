#!/usr/bin/env python3
"""Build the Level Zero loader with its null driver and validation layer, once per virtual environment.

The public loader source sits beside the repository (../shared/vendor/level-zero-loader-*.tar.gz, see
its README). Built with CMake into <venv>/level-zero-null/<source hash>/lib (a rerun finds it and
returns at once); tests/test_level_zero_null.py runs the project's Level Zero call sequence against
it with ZE_ENABLE_NULL_DRIVER=1 and the validation layer's parameter checks. Prints the lib folder.

    python tools/level_zero_null.py [--vendor DIR] [--cache DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT.parent / "shared" / "vendor"
TARGETS = ("ze_loader", "ze_validation_layer", "ze_tracing_layer", "ze_null")
#: The libraries a run needs (the tracing layer too: the loader loads one, and the system's may be older).
LIBS = ("libze_loader.so.1", "libze_validation_layer.so.1", "libze_tracing_layer.so.1", "libze_null.so.1")


def source(vendor: Path = VENDOR) -> Path:
    found = sorted(vendor.glob("level-zero-loader-*.tar.gz"))
    if not found:
        raise FileNotFoundError(f"{vendor}: no level-zero-loader-*.tar.gz (the loader source the tests build)")
    return found[-1]


def lib_dir(vendor: Path = VENDOR, cache: Path | None = None) -> Path:
    """Where the built libraries of this source live (whether or not they are built yet)."""
    key = hashlib.sha256(source(vendor).read_bytes()).hexdigest()[:16]
    return (cache or Path(sys.prefix) / "level-zero-null") / key / "lib"


def built(vendor: Path = VENDOR, cache: Path | None = None) -> Path | None:
    d = lib_dir(vendor, cache)
    return d if all((d / n).exists() for n in LIBS) else None


def build(vendor: Path = VENDOR, cache: Path | None = None) -> Path:
    done = built(vendor, cache)
    if done:
        return done
    final = lib_dir(vendor, cache).parent
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".build-") as tmp:
        tmp = Path(tmp)
        print(f"level-zero-null: extracting {source(vendor).name}", flush=True)
        with tarfile.open(source(vendor)) as tar:
            tar.extractall(tmp / "src", filter="data")
        top = next(p for p in (tmp / "src").rglob("CMakeLists.txt") if (p.parent / "source").is_dir()).parent
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        jobs = str(os.cpu_count() or 2)
        print("level-zero-null: configuring (cmake)", flush=True)
        subprocess.run(["cmake", *gen, "-S", str(top), "-B", str(tmp / "build"), "-DCMAKE_BUILD_TYPE=Release",
                        "-DBUILD_TESTING=OFF"], check=True, stdout=subprocess.DEVNULL)
        print(f"level-zero-null: building {', '.join(TARGETS)} (a few minutes, once per environment)", flush=True)
        subprocess.run(["cmake", "--build", str(tmp / "build"), "--parallel", jobs, "--target", *TARGETS],
                       check=True)
        stage = tmp / "out" / "lib"
        stage.mkdir(parents=True)
        for lib in (tmp / "build" / "lib").glob("*.so*"):
            shutil.copy2(lib, stage / lib.name, follow_symlinks=False)
        try:
            os.rename(stage.parent, final)  # atomic: a concurrent build of the same source wins or loses whole
        except OSError:
            if not built(vendor, cache):
                raise
    return lib_dir(vendor, cache)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vendor", type=Path, default=VENDOR)
    ap.add_argument("--cache", type=Path)
    args = ap.parse_args()
    try:
        print(build(args.vendor, args.cache))
    except (FileNotFoundError, subprocess.CalledProcessError) as e:
        print(f"level-zero-null: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
