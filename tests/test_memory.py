"""The memory table per rank (replay/memory.py, `shell inspect --memory`) against an independent count
from the tensor shapes of seed section 3/5 (the routed experts of the DeepSeek-V4.1 draft: 1,147.5 MiB
packed and 4,320 MiB expanded per stage and TP2 rank)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHIPPED_CORPUS, run_shell
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.geometry import DRAFT_KINDS, Geometry, MoeShape, preset
from decoder_shell.replay.memory import corpus_memory, memory_table

MIB = 1 << 20


def shapes_count(d: int, e: int, width: int, ranks: int, weights: str) -> dict[str, tuple[int, int]]:
    """(bytes as stored, bf16 bytes) per stage and rank of each MoE part, from the tensor list of the
    kernel contract (seed section 4): routed w13 [E,2,W,D/2] + s13 [E,2,W,D/32] + w2 [E,D,W/2] +
    s2 [E,D,W/32]; shared FP8 w13 [2,W,D] + s13 [2,W/32,D/32] + w2 [D,W] + s2 [D/32,W/32]; gate
    bf16 [E,D] + fp32 bias [E]; W = width / ranks."""
    w = width // ranks
    routed_bf16 = e * 3 * w * d * 2
    shared_bf16 = 3 * w * d * 2
    routed = e * (2 * w * d // 2 + 2 * w * d // 32 + d * w // 2 + d * w // 32) if weights == "packed" else routed_bf16
    shared = (3 * w * d + 2 * (w // 32) * (d // 32) + (d // 32) * (w // 32)) if weights == "packed" else shared_bf16
    return {"routed experts": (routed, routed_bf16), "shared expert": (shared, shared_bf16),
            "router (gate)": (e * d * 2 + e * 4, e * d * 2 + e * 4)}


def part(rank: dict, name: str) -> dict:
    return next(p for p in rank["parts"] if p["part"] == name)


@pytest.mark.parametrize("kind", ["dspark", "mtp1"])
def test_dsv41_draft_matches_seed_section_5(kind):
    g = preset("dsv41-draft", tp=2, draft_rows=5, draft_kind=kind)
    m = memory_table(g)
    stages = DRAFT_KINDS[kind]
    for r in m["ranks"]:
        routed = part(r, "routed experts")
        assert all(v == 1147.5 * MIB for v in routed["stages"].values()) and len(routed["stages"]) == stages
        assert routed["bytes"] == stages * 1147.5 * MIB
        assert routed["expanded_bytes"] == stages * 4320 * MIB
    if kind == "dspark":  # seed section 5: 3 stages x 128 experts = 3,442.5 MiB packed, 12,960.0 expanded
        assert part(m["ranks"][0], "routed experts")["bytes"] / MIB == 3442.5
        assert part(m["ranks"][0], "routed experts")["expanded_bytes"] / MIB == 12960.0


@settings(max_examples=30, deadline=None)
@given(d=st.sampled_from([64, 128, 256, 5120]), e=st.sampled_from([1, 3, 8, 128]), k=st.integers(1, 3),
       ranks=st.sampled_from([1, 2, 4]), wmul=st.integers(1, 4), kind=st.sampled_from(sorted(DRAFT_KINDS)),
       weights=st.sampled_from(["packed", "expanded"]), rows=st.integers(1, 32))
def test_parts_match_an_independent_count(d, e, k, ranks, wmul, kind, weights, rows):
    width = 32 * ranks * wmul
    g = Geometry(preset="t", hidden=d, layers=1, ranks=ranks, verify_rows=2, draft_rows=rows, draft_kind=kind,
                 moe=MoeShape(experts=e, top_k=min(k, e), width=width, weights=weights))
    m = memory_table(g)
    want = shapes_count(d, e, width, ranks, weights)
    stages = DRAFT_KINDS[kind]
    assert len(m["ranks"]) == ranks
    for r in m["ranks"]:
        for name, (stored, bf16) in want.items():
            p = part(r, name)
            assert p["bytes"] == stages * stored, name
            assert p["expanded_bytes"] == stages * bf16, name
            assert sorted(p["stages"]) == [f"draft {s}" for s in range(stages)]
        # the state arena holds every param and injected input (aligned), the outputs arena every output;
        # the cuda driver lays out no arenas for vLLM's stream-built MTP draft (it does not run it)
        if kind != "vllm-mtp":
            assert r["arenas"]["state (params + injected inputs)"] >= r["weights_bytes"]
            assert r["session_bytes"] == sum(r["arenas"].values())
        else:
            assert r["arenas"] == {} and "no arena layout" in m["note"]
        assert r["expanded_arena_bytes"] == (stages * (want["routed experts"][1] + want["shared expert"][1])
                                             if weights == "packed" else 0)


@pytest.mark.parametrize("weights", ["packed", "expanded"])
def test_corpus_manifests_give_the_geometry_table(tmp_path, weights):
    g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind="dspark", moe_weights=weights)
    c = synth(g, tmp_path / "c", seed=4)
    assert corpus_memory(Corpus.open(c.root)) == memory_table(g)


def test_inspect_memory(tmp_path):
    g = preset("tiny-moe", tp=2, verify_rows=2, draft_rows=5, draft_kind="dspark")
    synth(g, tmp_path / "c", seed=1)
    r = run_shell("inspect", tmp_path / "c", "--memory")
    assert r.returncode == 0, r.stderr
    assert "routed experts" in r.stdout and "device memory per rank (rank 0, 1)" in r.stdout
    routed, _ = shapes_count(64, 8, 128, 2, "packed")["routed experts"]
    assert f"draft 3 x {routed / MIB:,.1f}" in r.stdout
    j = run_shell("inspect", tmp_path / "c", "--memory", "--json")
    assert j.returncode == 0, j.stderr
    mem = json.loads(j.stdout)["memory"]
    assert part(mem["ranks"][1], "routed experts")["bytes"] == 3 * routed
    assert "memory" not in json.loads(run_shell("inspect", tmp_path / "c", "--json").stdout)


def test_inspect_memory_without_moe():
    r = run_shell("inspect", SHIPPED_CORPUS, "--memory", "--json")
    assert r.returncode == 0, r.stderr
    ranks = json.loads(r.stdout)["memory"]["ranks"]
    assert [p["part"] for p in ranks[0]["parts"]] == ["mHC / norms"]
    assert ranks[0]["expanded_arena_bytes"] == 0
