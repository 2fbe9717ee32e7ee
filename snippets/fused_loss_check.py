# SPDX-License-Identifier: Apache-2.0
"""The fused lm_head + cross-entropy against HF's, as a training step calls them.

HF: logits = lm_head(h) in the model's dtype, then ForCausalLMLoss (fp32, labels
shifted, -100 ignored). Ours: causal_lm_loss(h, lm_head.weight, labels), no logits.
Prints each result's largest difference from HF's, relative to HF's largest value.
Runs on the GPU, or on the CPU with TRITON_INTERPRET=1 set before triton is imported.
"""
import torch
from transformers.loss.loss_utils import ForCausalLMLoss

from linear_cross_entropy import CrossEntropyConfig, causal_lm_loss

# --8<-- [start:check]
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
batch, seq, hidden_size, vocab = 2, 64, 64, 1000
hidden = torch.randn(batch, seq, hidden_size, device=device, requires_grad=True)
weight = torch.randn(vocab, hidden_size, device=device) / hidden_size**0.5
weight.requires_grad_()
labels = torch.randint(0, vocab, (batch, seq), device=device)
labels[0, :20] = -100  # a masked prompt

hf_loss = ForCausalLMLoss(hidden @ weight.t(), labels, vocab)
hf = [hf_loss, *torch.autograd.grad(hf_loss, [hidden, weight])]
small = CrossEntropyConfig(chunk_tokens=48, block=256, num_warps=4)  # 3 chunks
ours_loss = causal_lm_loss(hidden, weight, labels, config=small)
ours = [ours_loss, *torch.autograd.grad(ours_loss, [hidden, weight])]
for name, theirs, mine in zip(["loss", "d hidden", "d weight"], hf, ours):
    error = (mine - theirs).abs().max() / theirs.abs().max()
    print(f"{name}: max |ours - HF| = {error.item():.2g} of max |HF|")
# --8<-- [end:check]
