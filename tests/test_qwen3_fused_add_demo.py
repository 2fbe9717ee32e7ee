"""snippets/qwen3_fused_add_demo.py: the usage block of the fused-add page runs, agrees with HF, undoes."""
import pathlib
import re
import runpy

import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

DEMO = pathlib.Path(__file__).resolve().parents[1] / "snippets" / "qwen3_fused_add_demo.py"
NAMES = ("Qwen3RMSNorm", "Qwen3DecoderLayer", "Qwen3Model")


def test_demo_runs_matches_hf_and_leaves_hf_in_place(capsys):
    before = {name: getattr(modeling_qwen3, name) for name in NAMES}
    namespace = runpy.run_path(str(DEMO), run_name="__main__")
    out = capsys.readouterr().out
    hf, fused = map(float, re.fullmatch(r"loss: HF (\S+), fused add \+ RMSNorm (\S+)\n", out).groups())
    assert abs(hf - fused) <= 1e-4 * abs(hf)  # fp32 model: the fused pairs compute HF's sums and norms
    assert {name: getattr(modeling_qwen3, name) for name in NAMES} == before
    model = namespace["model"]
    assert all(type(m).__module__ != "qwen3_fused_add_patch" for m in model.modules())  # undone
    assert all(p.grad is not None for p in model.parameters())  # the fused backward reached them
