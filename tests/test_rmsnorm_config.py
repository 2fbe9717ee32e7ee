"""The launch-config ladders (snippets/rmsnorm_config.py), checked against the rules they implement."""
import dataclasses

import pytest
import torch

import rmsnorm_config
import rmsnorm_triton
from rmsnorm_config import (ANY_WIDTH, LADDERS, MAX_COLS, UNTUNED_GPU_LADDERS, LaunchConfig, Rung,
                            fewest_padded_lanes, ladders_for, pick)

KINDS = ("forward", "backward", "fused_forward", "fused_backward")
WIDTHS = sorted(set(range(1, 2100)) | set(range(2100, 17000, 37)) | {
    2560, 4096, 5120, 8192, 9216, 10240, 12288, 14336, 16383, 16384, 16385, 20000, 20480, 24576, 28672,
    32768, 40000, 49152, 65536, 65537, 100000})


def padded_lanes(n_cols, chunk):
    return -(-n_cols // chunk) * chunk


@pytest.mark.parametrize("kind", KINDS)
def test_every_width_gets_a_config_the_kernels_accept(kind):
    for ladders in LADDERS.values():
        ladder = getattr(ladders, kind)
        assert ladder[-1].lanes == ANY_WIDTH  # the last rung takes whatever is left
        for n_cols in WIDTHS:
            config = pick(ladder, n_cols, *rmsnorm_triton.column_blocks(n_cols))
            rmsnorm_triton.check_config(config, n_cols)
            assert config.chunked or n_cols <= MAX_COLS, (kind, n_cols)  # registers hold <= MAX_COLS


@pytest.mark.parametrize("kind", KINDS)
def test_a_chunked_config_pads_the_fewest_lanes_of_its_candidates(kind):
    """The chunk is chosen by the lanes it pads (20480 = 5 x 4096 beats 3 x 8192), not by
    the number of chunks; equal padding takes the larger chunk."""
    ladder = getattr(LADDERS["sm_90"], kind)
    for n_cols in WIDTHS:
        split = rmsnorm_triton.column_blocks(n_cols)
        config = pick(ladder, n_cols, *split)
        if not config.chunked:
            continue
        rung = next(r for r in ladder if r.matches(n_cols, *split))
        fewest = min(padded_lanes(n_cols, c) for c in rung.chunks)
        assert padded_lanes(n_cols, config.block_cols) == fewest, (kind, n_cols)
        assert config.block_cols == max(c for c in rung.chunks if padded_lanes(n_cols, c) == fewest)
    assert fewest_padded_lanes(20480, (8192, 4096)) == 4096
    assert fewest_padded_lanes(24576, (8192, 4096)) == 8192  # a tie: the larger chunk
    assert fewest_padded_lanes(40000, (8192, 4096)) == 8192  # 40960 both ways
    assert fewest_padded_lanes(36864, (8192, 4096)) == 4096  # 36864 = 9 x 4096 < 5 x 8192


def test_the_first_matching_rung_decides():
    ladder = (Rung(1024, 2048, 4, tail=False), Rung(1536, 1024, 2, tail=True),
              Rung(ANY_WIDTH, 4096, 8, vector=False, chunks=(2048,)), Rung(8192, 1, 4),
              Rung(ANY_WIDTH, 1, 16, chunks=(8192, 4096)))
    assert pick(ladder, 512, 512, 0) == LaunchConfig(4, 512, 0, 4)  # tile 2048 // 512 rows
    assert pick(ladder, 300, 256, 64) == LaunchConfig(4, 256, 64, 2)  # tail rung: 1024 // 256
    assert pick(ladder, 3001, 2048, 1024) == LaunchConfig(2, 2048, 0, 8, chunked=True)  # unaligned
    assert pick(ladder, 3072, 2048, 1024) == LaunchConfig(1, 2048, 1024, 4)
    assert pick(ladder, 20480, 16384, 4096) == LaunchConfig(1, 4096, 0, 16, chunked=True)
    with pytest.raises(ValueError, match="no rung"):
        pick(ladder[:1], 4096, 4096, 0)


def test_rows_per_tile_follow_the_rung_tile():
    """block_rows = max(1, tile // block_cols), e.g. the H200 backward's q/k-norm rung."""
    for n_cols in (16, 64, 128, 200, 256, 300, 1000, 2560, 5120):
        split = rmsnorm_triton.column_blocks(n_cols)
        for kind in KINDS:
            ladder = getattr(LADDERS["sm_90"], kind)
            rung = next(r for r in ladder if r.matches(n_cols, *split))
            config = pick(ladder, n_cols, *split)
            if not config.chunked:
                assert config.block_rows == max(1, rung.tile // split[0]), (kind, n_cols)
                assert (config.num_warps, config.programs_per_sm, config.prefetch) == (
                    rung.num_warps, rung.programs_per_sm, rung.prefetch)


def test_a_gpu_without_a_ladder_gets_the_named_default(monkeypatch):
    ladders_for.cache_clear()
    try:
        for capability, expected in (((9, 0), LADDERS["sm_90"]), ((8, 0), UNTUNED_GPU_LADDERS),
                                     ((12, 0), UNTUNED_GPU_LADDERS)):
            monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
            ladders_for.cache_clear()
            assert ladders_for(torch.device("cuda", 0)) is expected
        assert ladders_for(torch.device("cpu")) is UNTUNED_GPU_LADDERS  # the interpreter
    finally:
        ladders_for.cache_clear()


def test_constexprs_name_the_kernel_arguments():
    register = LaunchConfig(2, 2048, 512, 4, 2, prefetch=False)
    assert register.constexprs() == {"BLOCK_ROWS": 2, "BLOCK_COLS": 2048, "TAIL_COLS": 512}
    assert register.constexprs("backward") == {"BLOCK_ROWS": 2, "BLOCK_COLS": 2048, "TAIL_COLS": 512,
                                               "PREFETCH": False}
    assert LaunchConfig(2, 8192, 0, 16, chunked=True).constexprs("backward") == {
        "BLOCK_ROWS": 2, "BLOCK_COLS": 8192}
    with pytest.raises(dataclasses.FrozenInstanceError):
        register.num_warps = 8


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_fused_candidates_are_runnable_and_cover_the_shipped(direction):
    for n_cols in (128, 256, 300, 1000, 1536, 2560, 4096, 5120, 8192, 12288, 16383, 16384, 24576, 65536):
        split = rmsnorm_triton.column_blocks(n_cols)
        configs = rmsnorm_config.fused_candidates(direction, n_cols, *split)
        assert configs and len(set(configs)) == len(configs)
        for config in configs:
            rmsnorm_triton.check_config(config, n_cols)
            assert config.chunked or config.block_rows == 1 or (
                config.block_rows * (split[0] + split[1]) <= 8192)
            assert direction == "backward" or (config.programs_per_sm == 1 and config.prefetch)
        assert any(c.chunked for c in configs) == (n_cols >= 8192)


def lanes_of(n_cols):
    """A row's lanes: block_cols + tail_cols of column_blocks (the count a rung bound holds)."""
    return sum(rmsnorm_triton.column_blocks(n_cols))


def bounded_rungs():
    """(GPU, kind, index, rung) of every rung with a lane bound (all but ANY_WIDTH) of every ladder."""
    return [(gpu, kind, i, rung) for gpu, ladders in LADDERS.items() for kind in KINDS
            for i, rung in enumerate(getattr(ladders, kind)) if rung.lanes != ANY_WIDTH]


def test_every_rung_bound_is_a_lane_count_that_rows_have():
    """A rung takes "rows of at most ``lanes`` lanes", and a row's lanes are column_blocks' powers of
    two: 1024, 2048 + 512, 8192 + 1024. A bound between two lane counts (9215, 8191, 12287, 1535) is
    off by one: it takes no row of its own count, and so hands the rows of the next lane count to the
    next rung. A lane count is its own width's lane count, so the bound must be a fixed point."""
    off = [(gpu, kind, i, rung.lanes, lanes_of(rung.lanes)) for gpu, kind, i, rung in bounded_rungs()
           if lanes_of(rung.lanes) != rung.lanes]
    assert not off, f"(GPU, ladder, rung, bound, the lane count of that many columns): {off}"


def test_snapping_the_bounds_to_lane_counts_changes_no_pick():
    """The same rule as what it decides: for every width from 1 to 20000, every ladder picks the same
    config as it does with each bound replaced by the smallest lane count at or above it."""
    widths = range(1, 20001)
    lane_counts = sorted({lanes_of(n) for n in widths})
    splits = {n: rmsnorm_triton.column_blocks(n) for n in widths}

    def snapped(bound):
        if bound == ANY_WIDTH or bound > lane_counts[-1]:
            return bound
        return next(lanes for lanes in lane_counts if lanes >= bound)

    for gpu, ladders in LADDERS.items():
        for kind in KINDS:
            ladder = getattr(ladders, kind)
            snapped_ladder = tuple(dataclasses.replace(r, lanes=snapped(r.lanes)) for r in ladder)
            moved = [n for n in widths if pick(ladder, n, *splits[n]) != pick(snapped_ladder, n, *splits[n])]
            bounds = [r.lanes for r in ladder if r.lanes != ANY_WIDTH]
            assert not moved, f"{gpu} {kind}: bounds {bounds} pick other configs for widths {moved[:5]}..."


def measured_widths():
    """Every row width that the H200 sweeps timed (docs/data/h200: tuning.json, explore-widths-*.json)."""
    import json
    import pathlib

    widths = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "width" and isinstance(value, int):
                    widths.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    data = pathlib.Path(__file__).parents[1] / "docs/data/h200"
    for path in [data / "tuning.json", *sorted(data.glob("explore-widths-*.json"))]:
        walk(json.loads(path.read_text()))
    return widths


def test_every_h200_rung_bound_is_the_lane_count_of_a_measured_width():
    """Each rung is the fastest config measured at the widths it covers (rmsnorm_config.py), so its
    edge is a measured one: every bound of the H200 ladders is the lane count of a width the sweeps
    timed. This also catches an off-by-one bound that is a lane count, but of no measured width:
    4097 = 4096 + a 1-lane tail (the rows of exactly 4097 columns)."""
    measured = {lanes_of(n) for n in measured_widths()}
    assert {128, 320, 1536, 2560, 9216, 12288, MAX_COLS} <= measured  # the data were found
    unmeasured = [(kind, i, rung.lanes) for gpu, kind, i, rung in bounded_rungs()
                  if gpu == "sm_90" and rung.lanes not in measured]
    assert not unmeasured, f"(ladder, rung, bound) whose edge no sweep timed: {unmeasured}"
