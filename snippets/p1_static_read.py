# SPDX-License-Identifier: Apache-2.0
"""Static reading of Qwen3: the module tree, module counts, and the source that
defines it.

Article 1 (docs/qwen3-fusion.md) shows this file in parts;
tests/test_p1_static_read.py tests it.

    python snippets/p1_static_read.py  # real Qwen3-8B geometry on the meta device
    # regenerate the page's copy of the torchinfo summary:
    python snippets/p1_static_read.py --write docs/generated/p1_torchinfo.txt
"""
import sys

# --8<-- [start:build]
import collections

import torch
from transformers import Qwen3ForCausalLM


def build_qwen3(config, device="meta") -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3ForCausalLM. On "meta" no weight memory is allocated,
    so even the 8B geometry builds in milliseconds on a laptop."""
    with torch.device(device):
        return Qwen3ForCausalLM(config)


def module_class_counts(model: torch.nn.Module) -> collections.Counter:
    """How many modules of each class the model holds: {'Qwen3RMSNorm': 145, ...}."""
    return collections.Counter(type(module).__name__ for module in model.modules())


def expected_rmsnorm_count(config) -> int:
    """input_layernorm, post_attention_layernorm, q_norm and k_norm per layer, plus
    the final norm."""
    return 4 * config.num_hidden_layers + 1
# --8<-- [end:build]


# --8<-- [start:torchinfo]
def torchinfo_summary(model: torch.nn.Module, seq_len: int = 16, depth: int = 5):
    """torchinfo's table with output shapes. It runs one forward: use a small model."""
    import torchinfo  # pip install torchinfo

    input_ids = torch.randint(0, model.config.vocab_size, (1, seq_len))
    return torchinfo.summary(
        model, input_data=input_ids, depth=depth, verbose=0, use_cache=False,
        col_names=("output_size", "num_params"), row_settings=("var_names",),
    )
# --8<-- [end:torchinfo]


# --8<-- [start:source]
import inspect


def source_of(obj) -> tuple[int, str]:
    """(first line number, source text) of a class or function, such as
    Qwen3DecoderLayer.forward."""
    lines, first_line = inspect.getsourcelines(obj)
    return first_line, "".join(lines)
# --8<-- [end:source]


# Helpers the article does not show: they feed the data behind its tables.
import pathlib  # noqa: E402

import transformers  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402


def parameter_counts(model: torch.nn.Module) -> dict:
    """Parameters per leaf-module class: where the weights of the model live."""
    counts = collections.Counter()
    for module in model.modules():
        own = sum(p.numel() for p in module.parameters(recurse=False))
        if own:
            counts[type(module).__name__] += own
    return dict(counts.most_common())


def modeling_source() -> dict:
    """Where this environment's Qwen3 modeling code lives, with the transformers
    version."""
    path = pathlib.Path(inspect.getsourcefile(modeling_qwen3))
    site_packages = pathlib.Path(transformers.__file__).resolve().parents[1]
    relative = path.resolve().relative_to(site_packages).as_posix()
    version = transformers.__version__
    return {
        "transformers": version,
        "path": str(path),
        "relative": relative,
        "url": ("https://github.com/huggingface/transformers/blob/"
                f"v{version}/src/{relative}"),
    }


def torchinfo_report() -> str:
    """The text of docs/generated/p1_torchinfo.txt: the summary the usage prints for
    the tiny model."""
    import torchinfo

    from qwen3_configs import tiny_qwen3_config

    header = (f"# on a CPU: torchinfo {torchinfo.__version__}, "
              f"transformers {transformers.__version__}, "
              f"torch {torch.__version__.split('+')[0]}: "
              "torchinfo_summary(tiny Qwen3), 16 tokens")
    return (header + "\n"
            + str(torchinfo_summary(build_qwen3(tiny_qwen3_config(), device="cpu")))
            + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        pathlib.Path(sys.argv[2]).write_text(torchinfo_report(), encoding="utf-8")
        sys.exit()
    # --8<-- [start:usage]
    from qwen3_configs import qwen3_config, tiny_qwen3_config

    config = qwen3_config("8B")                 # 36 layers, hidden 4096, head_dim 128
    model = build_qwen3(config, device="meta")  # shapes only, no memory
    print(model)
    counts = module_class_counts(model)
    print(counts.most_common(6))
    print("Qwen3RMSNorm:", counts["Qwen3RMSNorm"], "= 4 x 36 + 1 =",
          expected_rmsnorm_count(config))
    # torchinfo runs one forward for the output shapes: a tiny Qwen3 (2 layers,
    # hidden 64) on the CPU
    print(torchinfo_summary(build_qwen3(tiny_qwen3_config(), device="cpu")))
    # --8<-- [end:usage]

    # --8<-- [start:usage_source]
    import transformers
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    from p1_static_read import source_of

    print(f"transformers {transformers.__version__}: modeling_qwen3.py")
    first_line, text = source_of(Qwen3DecoderLayer.forward)
    print(f"Qwen3DecoderLayer.forward starts at line {first_line}:")
    print(text)
    # --8<-- [end:usage_source]
