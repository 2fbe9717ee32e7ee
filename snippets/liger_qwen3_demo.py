# SPDX-License-Identifier: Apache-2.0
"""Liger-Kernel's Qwen3 patch on a tiny Qwen3: patch, build, count swapped modules,
train one step.

`apply_liger_kernel_to_qwen3()` rebinds names inside transformers' modeling_qwen3
(the RMSNorm class, the MLP class, the rotary function, the CausalLM forward), so
it must run *before* the model is built, and it changes the whole process.
`liger_patched()` puts the original names back afterwards.

Liger's RMSNorm kernel does not run under the Triton interpreter (it calls
`.to()` on the Python-float `eps`), so on CPU the demo stops after counting
modules; on a CUDA GPU it also runs forward + backward and compares with HF.
"""
# --8<-- [start:patch]
import contextlib

from transformers.models.qwen3 import modeling_qwen3


@contextlib.contextmanager
def liger_patched(**liger_options):
    """apply_liger_kernel_to_qwen3() inside a with-block, undone on exit."""
    from liger_kernel.transformers import apply_liger_kernel_to_qwen3

    names = ("Qwen3RMSNorm", "Qwen3MLP", "apply_rotary_pos_emb")
    saved = {name: getattr(modeling_qwen3, name) for name in names}
    saved_forward = modeling_qwen3.Qwen3ForCausalLM.forward
    apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True,
                                fused_linear_cross_entropy=True, **liger_options)
    try:
        yield
    finally:  # the patch is process-global: undo it
        for name, value in saved.items():
            setattr(modeling_qwen3, name, value)
        modeling_qwen3.Qwen3ForCausalLM.forward = saved_forward


def count_by_class(model):
    counts = {}
    for module in model.modules():
        name = type(module).__name__
        if name.endswith(("RMSNorm", "MLP")):
            counts[name] = counts.get(name, 0) + 1
    return counts
# --8<-- [end:patch]


if __name__ == "__main__":
    # --8<-- [start:demo]
    import torch

    from qwen3_configs import tiny_qwen3_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = tiny_qwen3_config()  # 2 layers, hidden 64, head_dim 16
    torch.manual_seed(0)
    reference = modeling_qwen3.Qwen3ForCausalLM(config).to(device)  # plain HF
    input_ids = torch.randint(0, config.vocab_size, (2, 16), device=device)

    # Rope and the LCE forward are looked up at call time: stay inside the patch.
    with liger_patched():
        # Build the model AFTER patching.
        model = modeling_qwen3.Qwen3ForCausalLM(config).to(device)
        model.load_state_dict(reference.state_dict())  # same weights as the HF model
        counts = count_by_class(model)
        print(f"modules by class: {counts}")  # 4 norms per layer + the final norm
        if device == "cuda":  # Liger's RMSNorm cannot run under the Triton interpreter
            loss = model(input_ids=input_ids, labels=input_ids).loss
            loss.backward()
            reference_loss = reference(input_ids=input_ids, labels=input_ids).loss
            reference_loss.backward()
            torch.testing.assert_close(loss, reference_loss, rtol=1e-4, atol=1e-4)
            q_norm = model.model.layers[0].self_attn.q_norm.weight.grad
            q_norm_ref = reference.model.layers[0].self_attn.q_norm.weight.grad
            torch.testing.assert_close(q_norm, q_norm_ref, rtol=1e-3, atol=1e-4)
            print(f"Liger loss {loss.item():.5f} == HF loss "
                  f"{reference_loss.item():.5f}; gradients match")
    # --8<-- [end:demo]
