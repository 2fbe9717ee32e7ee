"""transformers' own kernel switch (use_kernels; on by default from 5.25) and this site's patches.

kernelize() sets a hub layer's forward on every module whose class has a hub kernel name, HF's
Qwen3RMSNorm ("RMSNorm") and any subclass of it. The CI machines cannot reach the Hub, where
kernelize quietly keeps the class's forward: here a local layer repository, mapped for the CPU,
stands in for the Hub's LigerRMSNorm, and records every call. Checked: at from_pretrained and at
train() / eval(), every module the patch installs runs its own forward (the marker never runs
where the patch replaced a norm), HF's loss and gradients; undo() puts back what kernelize had
set; modules the patch leaves alone still get the switch's layer. And this site's RMSNorm
offered through the switch (qwen3_kernels_layer.py). Runs where the `kernels` package is
installed (transformers 5.25 requires it; .ci/test.sh runs this file on each transformers).
"""
import json

import pytest
import torch

kernels = pytest.importorskip("kernels", reason="the `kernels` package is not installed "
                              "(transformers 5.25 requires it; older ones run without it)")
from kernels import LocalLayerRepository, Mode, use_kernel_mapping  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import qwen3_fusion_patch  # noqa: E402
import qwen3_kernels_layer  # noqa: E402
from helpers import loss_and_grads, qwen3_patches_undone, rel_err, tiny_model  # noqa: E402
from qwen3_fusion_patch import apply_qwen3_fusion  # noqa: E402

MARKER = '''
import torch

CALLS = []


class MarkerRMSNorm(torch.nn.Module):
    """Stands in for the Hub's LigerRMSNorm: HF's arithmetic, and a record of each call."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states):
        CALLS.append(id(self))
        x = hidden_states.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)
'''


@pytest.fixture(scope="module")
def marker(tmp_path_factory):
    """(a mapping of "RMSNorm" on the CPU to the marker layer, its list of calls)."""
    root = tmp_path_factory.mktemp("marker_repository")
    variant = root / "build" / "torch-universal"
    (variant / "marker_layers").mkdir(parents=True)
    (variant / "metadata.json").write_text(json.dumps({
        "name": "marker-layers", "id": "marker_layers", "version": 1, "license": "Apache-2.0",
        "python-depends": [], "backend": {"type": "universal"}}))
    (variant / "marker_layers" / "__init__.py").write_text("from . import layers\n")
    (variant / "marker_layers" / "layers.py").write_text(MARKER)
    repository = LocalLayerRepository(repo_path=root, layer_name="MarkerRMSNorm")
    layer = repository.load()
    calls = __import__(layer.__module__, fromlist=["CALLS"]).CALLS
    return {"RMSNorm": {"cpu": repository}}, calls


@pytest.fixture
def saved(tmp_path):
    model = tiny_model("cpu")
    model.save_pretrained(tmp_path)
    return tmp_path, model


def instance_forwards(model) -> dict:
    return {name: m.__dict__["forward"] for name, m in model.named_modules() if "forward" in m.__dict__}


def our_modules(model) -> list:
    return [m for m in model.modules() if type(m).__module__ in (
        "qwen3_fusion_patch", "qwen3_fused_add_patch", "rmsnorm_triton")]


def loaded(folder):
    """from_pretrained as a reader calls it (use_kernels: the default where it is on)."""
    model = AutoModelForCausalLM.from_pretrained(folder, use_kernels=True)
    assert model.use_kernels
    return model


@pytest.mark.parametrize("way", ["apply_after_loading", "patch_before_loading"])
def test_patched_modules_keep_their_forward_through_every_kernelize(marker, saved, way):
    mapping, calls = marker
    folder, hf = saved
    hf.train()
    ref_loss, ref_grads = loss_and_grads(hf, torch.arange(24).reshape(2, 12) % hf.config.vocab_size)
    ids = torch.arange(24).reshape(2, 12) % hf.config.vocab_size
    with qwen3_patches_undone(), use_kernel_mapping(mapping):
        if way == "patch_before_loading":
            undo = apply_qwen3_fusion(loss=True)
            model = loaded(folder)
            assert instance_forwards(model) == {}  # our classes opt out: nothing set
        else:
            model = loaded(folder)
            norms = [n for n, m in model.named_modules() if "norm" in n]
            assert sorted(instance_forwards(model)) == sorted(norms)  # what the issue saw
            kernelized = instance_forwards(model)
            undo = apply_qwen3_fusion(model, loss=True)
        assert our_modules(model)
        for mode in ("train", "eval", "train"):  # each change of mode kernelizes again
            getattr(model, mode)()
            assert model.kernels_mode == (Mode.TRAINING if mode == "train" else Mode.INFERENCE)
            assert all("forward" not in m.__dict__ for m in our_modules(model)), mode
            calls.clear()
            loss, grads = loss_and_grads(model, ids)
            assert calls == [], f"the switch's layer ran in place of ours ({mode})"
            assert rel_err(loss, ref_loss) < 1e-6
            assert max(rel_err(grads[n], ref_grads[n]) for n in grads) < 1e-5
        undo()
        if way == "apply_after_loading":  # what kernelize had set is back, the same objects
            assert instance_forwards(model) == kernelized


def test_modules_the_patch_leaves_alone_still_get_the_switch(marker, saved):
    """The decision: the patch keeps its own modules' kernels, and leaves transformers' switch
    in charge of everything it does not replace (here every norm: rms_norm=False)."""
    mapping, calls = marker
    folder, _ = saved
    with qwen3_patches_undone(), use_kernel_mapping(mapping):
        model = loaded(folder).train()
        undo = apply_qwen3_fusion(model, rms_norm=False, fused_add=False, qk_norm_rope=False)
        calls.clear()
        ids = torch.arange(24).reshape(2, 12) % model.config.vocab_size
        model(input_ids=ids, labels=ids).loss.backward()
        layers = model.config.num_hidden_layers
        assert len(calls) == 4 * layers + 1  # input, post-attention, q and k norms; the final norm
        undo()


@pytest.fixture
def cpu_kernel_config(monkeypatch):
    """KernelConfig refuses a CPU device (its list of device types has no "cpu"); the rest of
    its path is what runs on a GPU. Let it map the CPU here."""
    from transformers.utils import kernel_config

    monkeypatch.setattr(kernel_config, "KERNELS_SUPPORTED_DEVICE_TYPES",
                        [*kernel_config.KERNELS_SUPPORTED_DEVICE_TYPES, "cpu"])
    return kernel_config.KernelConfig


def test_this_sites_rmsnorm_through_kernel_config(saved, tmp_path_factory, cpu_kernel_config,
                                                  monkeypatch):
    """KernelConfig(use_local_kernel) with qwen3_kernels_layer's repository: HF's modules run the
    Triton RMSNorm, with HF's loss. KernelConfig maps the mode the model is in when it is applied:
    applied in eval mode, train() falls back to HF's own forward; applied after train(), training
    runs ours. from_pretrained(kernel_config=...) with a local path fails in transformers 5.25
    (it turns the path into a tuple that its local branch then splits as a string)."""
    folder, hf = saved
    repository = qwen3_kernels_layer.write_local_repository(tmp_path_factory.mktemp("ours"))
    seen = []
    real = qwen3_kernels_layer.rms_norm
    monkeypatch.setattr(qwen3_kernels_layer, "rms_norm",
                        lambda *args: seen.append(1) or real(*args))

    def config():
        return cpu_kernel_config({"RMSNorm": f"{repository}:TritonRMSNorm"}, use_local_kernel=True)

    ids = torch.arange(24).reshape(2, 12) % hf.config.vocab_size
    hf.train()
    ref_loss, _ = loss_and_grads(hf, ids)
    with qwen3_patches_undone():
        with pytest.raises(AttributeError, match="'tuple' object has no attribute 'split'"):
            AutoModelForCausalLM.from_pretrained(folder, use_kernels=True, kernel_config=config())
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        norm = model.model.layers[0].input_layernorm
        model.set_use_kernels(True, kernel_config=config())  # in eval mode: inference only
        assert norm.forward.__qualname__ == "TritonRMSNorm.forward"
        model.train()
        assert "forward" not in norm.__dict__  # HF's own forward again
        model.set_use_kernels(True, kernel_config=config())  # after train(): training too
        assert norm.forward.__qualname__ == "TritonRMSNorm.forward"
        seen.clear()
        loss, _ = loss_and_grads(model, ids)
        assert len(seen) == 4 * model.config.num_hidden_layers + 1
        assert rel_err(loss, ref_loss) < 1e-6
        model.eval()  # inference falls back to the training entry
        assert norm.forward.__qualname__ == "TritonRMSNorm.forward"


def test_the_switch_demo_runs(capsys, cpu_kernel_config):
    """snippets/kernel_switch_demo.py as a reader runs it (on the CPU under the allowance above)."""
    import pathlib
    import runpy

    with qwen3_patches_undone():
        runpy.run_path(str(pathlib.Path(qwen3_kernels_layer.__file__).with_name("kernel_switch_demo.py")),
                       run_name="__main__")
    out = capsys.readouterr().out
    assert "input_layernorm runs: TritonRMSNorm.forward" in out and "loss:" in out
