# SPDX-License-Identifier: Apache-2.0
"""Launch configs of the RMSNorm kernels (rmsnorm_triton.py), as ladders per GPU.

A ladder is a list of rungs, narrowest rows first. A row of n_cols is split into
power-of-two blocks (``column_blocks`` in rmsnorm_triton.py: 2560 = 2048 + 512);
its *lanes* are block_cols + tail_cols. The first rung whose ``lanes`` bound
holds the row (and whose ``tail`` / ``vector`` conditions match) gives the config.

The ladders of a GPU architecture come from timing every candidate config at 43
row widths on that GPU (``python -m bench.explore_widths``): sm_90, the H200, is
the measured one. A GPU no ladder covers gets ``UNTUNED_GPU_LADDERS`` (the H200's
rules, not measured there); bench/README.md says how to tune one.
"""
import dataclasses
import functools

import torch

MAX_COLS = 16384  # widest row held in registers; wider rows take the chunked kernels
ANY_WIDTH = 1 << 62  # a rung bound that every row fits


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """How a kernel is launched for rows of one width (one type for both directions)."""

    block_rows: int  # BLOCK_ROWS: rows per tile
    block_cols: int  # BLOCK_COLS and TAIL_COLS: the split that column_blocks gives
    tail_cols: int
    num_warps: int
    programs_per_sm: int = 1  # backward only: resident programs of the persistent grid
    chunked: bool = False  # walk rows in chunks of block_cols (the *_chunked kernels)
    prefetch: bool = True  # register backward: next tile's loads before this math
    reread: bool = False  # register backward: each tile read twice (no prefetch)

    def constexprs(self, direction: str = "forward") -> dict[str, int]:
        """The kernel's constexpr launch arguments (PREFETCH: the register backward)."""
        if self.chunked:
            return {"BLOCK_ROWS": self.block_rows, "BLOCK_COLS": self.block_cols}
        blocks = {"BLOCK_ROWS": self.block_rows, "BLOCK_COLS": self.block_cols,
                  "TAIL_COLS": self.tail_cols}
        if direction != "backward" or self.reread:
            return blocks
        return blocks | {"PREFETCH": self.prefetch}


@dataclasses.dataclass(frozen=True)
class Rung:
    """Rows of at most ``lanes`` lanes take this rung's launch config.

    ``tile``: elements of the main block per tile, so block_rows is
    max(1, tile // block_cols) (tile=1: one row). ``tail``: True or False limits
    the rung to rows with or without a tail block. ``vector``: False limits it to
    rows of n_cols % 8 != 0 (no 16-byte loads of 16-bit values). ``chunks``: the
    chunked kernels, with the chunk that pads the fewest lanes among these.
    ``prefetch``, ``reread``: the register backward's.
    """

    lanes: int
    tile: int
    num_warps: int
    programs_per_sm: int = 1
    tail: bool | None = None
    vector: bool | None = None
    chunks: tuple[int, ...] = ()
    prefetch: bool = True
    reread: bool = False

    def matches(self, n_cols: int, block_cols: int, tail_cols: int) -> bool:
        return (block_cols + tail_cols <= self.lanes
                and self.tail in (None, tail_cols > 0)
                and self.vector in (None, n_cols % 8 == 0))


def fewest_padded_lanes(n_cols: int, chunks) -> int:
    """The chunk whose whole chunks cover n_cols in the fewest lanes (ties: larger)."""
    return min(chunks, key=lambda chunk: (-(-n_cols // chunk) * chunk, -chunk))


def pick(ladder, n_cols: int, block_cols: int, tail_cols: int) -> LaunchConfig:
    """The launch config of the first rung that matches a row of n_cols."""
    for rung in ladder:
        if rung.matches(n_cols, block_cols, tail_cols):
            if rung.chunks:
                chunk = fewest_padded_lanes(n_cols, rung.chunks)
                return LaunchConfig(max(1, rung.tile // chunk), chunk, 0,
                                    rung.num_warps, rung.programs_per_sm, chunked=True)
            return LaunchConfig(max(1, rung.tile // block_cols), block_cols, tail_cols,
                                rung.num_warps, rung.programs_per_sm,
                                prefetch=rung.prefetch, reread=rung.reread)
    raise ValueError(f"no rung of the ladder takes rows of {n_cols}")


# ------------------------------------------------------------------ H200 (sm_90)
# From the explorations in docs/data/h200/explore-widths-*.json (bench/PERF_LOG.md):
# each rung is the fastest config measured at the widths it covers, or within 2 %.

H200_FORWARD = (
    Rung(1536, 1024, 2, tail=True),  # 300 = 256 + 64: 4 rows; 1536 = 1024 + 512: 1 row
    Rung(1024, 2048, 4, tail=False),  # 128: 16 rows; 1024: 2 rows
    Rung(5120, 1, 2),  # 2048 .. 5120: one row on 2 warps
    Rung(8192, 1, 4),
    Rung(ANY_WIDTH, 2048, 16, vector=False, chunks=(2048,)),  # 16383: no 16-byte loads
    Rung(9216, 1, 4),  # 8192 + 1024
    Rung(10240, 1, 2),  # 8192 + 2048 (explore-widths-eb8e954-plain10k.json)
    Rung(12288, 1, 4),  # 8192 + 4096
    Rung(MAX_COLS, 1, 8),
    # 20480 = 5 x 4096; 32 warps with L2 hints and a constant width
    # (explore-widths-a60ed77-eviction-unroll.json)
    Rung(ANY_WIDTH, 1, 32, chunks=(8192, 4096)),
)

H200_BACKWARD = (
    Rung(128, 1024, 4, 8),  # q/k-norm rows: 8 rows of 128 per tile, 8 programs per SM
    Rung(256, 512, 4, 8),
    Rung(2048, 1024, 4, 4, tail=True),  # 300 = 256 + 64: 4 rows; 1536: 1 row
    Rung(2048, 2048, 4, 4, tail=False),  # 1024: 2 rows; 2048: 1 row
    Rung(4096, 1, 8, 2, tail=False),
    Rung(8192, 4096, 4, 2, tail=True),  # 2560: 2 rows of 2048 + 512; 5120: 1 row
    Rung(8192, 1, 8, 1, tail=False),
    Rung(12288, 1, 8, 1),  # 8192 + a tail
    Rung(ANY_WIDTH, 4096, 8, 2, vector=False, chunks=(2048,)),  # 2 rows of 2048
    Rung(MAX_COLS, 1, 16, 1, reread=True),  # 14336, 16384: each tile read twice
    Rung(ANY_WIDTH, 16384, 16, 1, chunks=(8192,)),  # 2 rows of 8192 per tile
)

H200_FUSED_FORWARD = (  # explore-widths-fused-be832ca.json: x and residual per element
    Rung(256, 1024, 4),
    Rung(320, 1024, 2, tail=True),  # 300 = 256 + 64
    Rung(384, 1024, 4, tail=True),
    Rung(512, 2048, 8, tail=False),
    Rung(768, 1024, 2, tail=True),  # 520 .. 768 = 512 + a tail: 2 rows
    Rung(1024, 2048, 8, tail=False),
    Rung(1536, 1, 2, tail=True),
    Rung(2048, 1, 8, tail=False),
    Rung(3072, 1, 4, tail=True),
    Rung(4096, 1, 2, tail=False),
    Rung(5120, 1, 2, tail=True),
    Rung(6144, 1, 4, tail=True),
    Rung(8192, 1, 4),
    Rung(ANY_WIDTH, 2048, 8, vector=False, chunks=(2048,)),  # 16383
    Rung(10240, 1, 16, chunks=(4096,)),  # 8192 + 2048: chunks of 4096
    Rung(12288, 1, 16),  # 8192 + 4096: in registers
    Rung(MAX_COLS, 1, 8, chunks=(8192,)),
    Rung(ANY_WIDTH, 1, 16, chunks=(8192, 4096)),
)

H200_FUSED_BACKWARD = (  # dy, ds and s per element: smaller tiles than the plain one
    Rung(256, 1024, 8, 4),
    Rung(384, 1024, 4, 4, tail=True),
    Rung(768, 1024, 4, 4),  # 512 .. 768: 2 rows, 4 programs per SM
    Rung(1024, 1, 4, 4),
    Rung(1280, 1, 4, 4, tail=True),
    Rung(1536, 1, 4, 4, tail=True, vector=False),  # 1500
    Rung(1536, 2048, 8, 2, tail=True),  # 1536 = 1024 + 512: 2 rows, 8 warps
    Rung(2048, 4096, 4, 2, tail=False),
    Rung(4096, 1, 4, 2),
    Rung(4608, 1, 8, 2, tail=True, prefetch=False),  # 4096 + 512
    Rung(5120, 1, 4, 2, tail=True, prefetch=False),  # 4096 + 1024
    Rung(6144, 1, 16, 1, tail=True),
    Rung(8192, 1, 16, 1),
    Rung(ANY_WIDTH, 4096, 16, 2, vector=False, chunks=(2048,)),  # 16383: 2 rows of 2048
    Rung(10240, 1, 8, 1, prefetch=False),  # 8192 + 2048: no prefetch, no spill
    Rung(12288, 1, 16, 1, prefetch=False),
    Rung(MAX_COLS, 1, 16, 1, reread=True),  # 14336, 16384: each tile read twice
    Rung(ANY_WIDTH, 16384, 16, 1, chunks=(8192,)),  # 2 rows of 8192
)


@dataclasses.dataclass(frozen=True)
class Ladders:
    """The four ladders of one GPU architecture."""

    forward: tuple[Rung, ...]
    backward: tuple[Rung, ...]
    fused_forward: tuple[Rung, ...]
    fused_backward: tuple[Rung, ...]


LADDERS = {
    "sm_90": Ladders(H200_FORWARD, H200_BACKWARD,
                     H200_FUSED_FORWARD, H200_FUSED_BACKWARD),
}
# Any other GPU (and the CPU interpreter) runs the H200's rules until it has its own.
UNTUNED_GPU_LADDERS = LADDERS["sm_90"]


def cached_outside_compile(fn):
    """``functools.cache(fn)`` for eager calls. Under torch.compile, ``fn`` itself:
    Dynamo traces the function anyway (its result is a constant of the graph), and
    warns on every compile when it meets a cache wrapper."""
    cached = functools.cache(fn)

    @functools.wraps(fn)
    def call(*args):
        return fn(*args) if torch.compiler.is_compiling() else cached(*args)

    call.cache_clear = cached.cache_clear
    return call


@cached_outside_compile
def ladders_for(device: torch.device) -> Ladders:
    """The ladders of the GPU that ``device`` is on (UNTUNED_GPU_LADDERS if none)."""
    if device.type != "cuda":
        return UNTUNED_GPU_LADDERS
    major, minor = torch.cuda.get_device_capability(device)
    return LADDERS.get(f"sm_{major}{minor}", UNTUNED_GPU_LADDERS)


# ------------------------------------------------------------------ candidates

FORWARD_WARPS, BACKWARD_WARPS = (2, 4, 8, 16), (4, 8, 16)
BACKWARD_PROGRAMS_PER_SM = (1, 2, 4, 8)
CHUNKS = (2048, 4096, 8192)
MAX_TILE = {"forward": 16384, "backward": 8192}  # register-sized tiles (x, dy, dW acc)


def candidates(direction: str, n_cols: int, block_cols: int, tail_cols: int):
    """Every config the H200 sweeps time for rows of n_cols, in sweep order.

    Register tiles of BLOCK_ROWS x (BLOCK_COLS + TAIL_COLS) up to MAX_TILE values;
    rows of 4096 and wider also try the chunked kernels; rows wider than MAX_COLS
    have only those.
    """
    warps = FORWARD_WARPS if direction == "forward" else BACKWARD_WARPS
    per_sm = (1,) if direction == "forward" else BACKWARD_PROGRAMS_PER_SM
    configs = []
    if n_cols <= MAX_COLS:
        lanes = block_cols + tail_cols
        rows = [r for r in (1, 2, 4, 8, 16, 32, 64)
                if r == 1 or r * lanes <= MAX_TILE[direction]]
        configs += [LaunchConfig(r, block_cols, tail_cols, w, p)
                    for r in rows for w in warps for p in per_sm]
    if n_cols >= 4096:
        chunked_warps = (4, 8, 16, 32) if direction == "forward" else (4, 8, 16)
        configs += [LaunchConfig(r, chunk, 0, w, p, chunked=True)
                    for chunk in CHUNKS for r in (1, 2)
                    for w in chunked_warps for p in per_sm[:2]]
    return configs


def fused_candidates(direction: str, n_cols: int, block_cols: int, tail_cols: int):
    """The configs explored for the fused add (three tensors per element backward).

    Register tiles of 1024 to 8192 elements (or one row), 4 to 64 elements per
    thread forward; backward 4 to 32 with prefetch, fewer programs per SM for
    bigger tiles, and one-row tiles of 4096 lanes and wider also without
    prefetch (up to 64 per thread, as the plain backward runs 14336-16384 lanes).
    Rows of 8192 and wider: the chunked kernels too.
    """
    lanes = block_cols + tail_cols
    configs = []
    if n_cols <= MAX_COLS:
        rows = sorted({max(1, tile // block_cols) for tile in (1024, 2048, 4096, 8192)})
        rows = [r for r in rows if r == 1 or r * lanes <= 8192]
        for r in rows:
            tile = r * lanes
            if direction == "forward":
                configs += [LaunchConfig(r, block_cols, tail_cols, w)
                            for w in (2, 4, 8, 16) if 4 <= tile / (32 * w) <= 64]
                continue
            per_sm = (4, 8) if tile <= 2048 else (2, 4) if tile <= 4096 else (1, 2)
            for w in (4, 8, 16):
                per_thread = tile / (32 * w)
                for p in per_sm:
                    if 4 <= per_thread <= 32:
                        configs.append(LaunchConfig(r, block_cols, tail_cols, w, p))
                    if r == 1 and lanes >= 4096 and 4 <= per_thread <= 64:
                        configs.append(LaunchConfig(r, block_cols, tail_cols, w, p,
                                                    prefetch=False))
    if n_cols >= 8192:
        chunks = (2048,) if n_cols % 8 else (4096, 8192)
        if direction == "forward":
            configs += [LaunchConfig(1, c, 0, w, chunked=True)
                        for c in chunks for w in (8, 16)]
        else:
            configs += [LaunchConfig(r, c, 0, w, p, chunked=True) for c in chunks
                        for r in (1, 2) for w in (8, 16) for p in (1, 2)]
    if direction == "backward":
        configs += reread_candidates(n_cols, block_cols, tail_cols)
    return list(dict.fromkeys(configs))


def reread_candidates(n_cols: int, block_cols: int, tail_cols: int):
    """The register backward that reads each tile twice (``reread``), for rows of
    8192 < n_cols <= MAX_COLS: as column_blocks splits the row or as two equal
    halves (16384 = 8192 + 8192), 8 or 16 warps, 1 or 2 programs per SM."""
    if not 8192 < n_cols <= MAX_COLS:
        return []
    half = 1 << (n_cols - 1).bit_length() - 1  # the power of two below the row
    splits = dict.fromkeys([(block_cols, tail_cols),
                            (half, 1 << (n_cols - half - 1).bit_length())])
    return [LaunchConfig(1, b, t, w, p, reread=True)
            for b, t in splits for w in (8, 16) for p in (1, 2)]
