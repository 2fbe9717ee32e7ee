# SPDX-License-Identifier: Apache-2.0
"""HF Trainer with gradient accumulation, with and without apply_qwen3_fusion.

Under gradient accumulation, Trainer counts the target tokens of all the
micro-batches of one optimizer step and passes that count to the model as
``num_items_in_batch``. Each micro-batch's loss is then its sum over tokens
divided by the count, so the accumulated gradient is the mean over the whole
step, however the tokens fall into micro-batches. The fused loss takes the same
argument (linear_cross_entropy.causal_lm_loss).

``train()`` runs Trainer and keeps the gradients of each optimizer step (no
clipping, so they are the raw accumulated sums). The demo trains the same tiny
Qwen3 on the same rows of different lengths twice, HF's and fused, and
compares. On CPU, set TRITON_INTERPRET=1 before triton is imported.
"""
# --8<-- [start:train]
import tempfile

import torch
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments


class KeepGradients(TrainerCallback):
    """A copy of every gradient just before each optimizer step."""

    def __init__(self):
        self.steps = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.steps.append({name: p.grad.clone() for name, p in model.named_parameters()
                           if p.grad is not None})


def train(model, dataset, *, collator=None, accumulation=2, batch_size=2, steps=1):
    """Train with HF's Trainer. Returns the logged loss of each optimizer step and
    the gradients each step used."""
    keep = KeepGradients()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            out, per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation, max_steps=steps,
            optim="sgd", learning_rate=0.1, max_grad_norm=0.0,  # no clipping
            logging_steps=1, save_strategy="no", report_to="none", seed=0,
            disable_tqdm=True, use_cpu=not torch.cuda.is_available())
        trainer = Trainer(model=model, args=args, train_dataset=dataset,
                          data_collator=collator, callbacks=[keep])
        trainer.remove_callback(PrinterCallback)  # the logs stay in state
        trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return losses, keep.steps


def padded_rows(vocab_size, lengths, width=16, seed=0):
    """Rows of random tokens, right-padded to ``width``: input_ids, attention_mask,
    and labels with -100 on the padding."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for length in lengths:
        ids = torch.randint(0, vocab_size, (width,), generator=generator)
        mask = (torch.arange(width) < length).long()
        rows.append({"input_ids": ids, "attention_mask": mask,
                     "labels": ids.masked_fill(mask == 0, -100)})
    return rows
# --8<-- [end:train]


if __name__ == "__main__":
    # --8<-- [start:demo]
    from transformers import AutoModelForCausalLM

    from qwen3_configs import tiny_qwen3_config
    from qwen3_fusion_patch import apply_qwen3_fusion

    def tiny_qwen3():
        torch.manual_seed(0)  # the same weights each time
        return AutoModelForCausalLM.from_config(tiny_qwen3_config())

    # one step: 2 micro-batches of 2 rows; however the rows are shuffled, the two
    # micro-batches hold different numbers of targets (7, 4, 6, 2 per row)
    rows = padded_rows(tiny_qwen3_config().vocab_size, lengths=[8, 5, 7, 3], width=8)
    hf_losses, hf_grads = train(tiny_qwen3(), rows)

    model = tiny_qwen3()
    undo = apply_qwen3_fusion(model, loss=True)  # every part, the loss included
    losses, grads = train(model, rows)
    undo()
    print(f"loss: HF {hf_losses[0]:.6f}, fused {losses[0]:.6f}")
    error = max(((grads[0][n] - g).norm() / g.norm()).item()
                for n, g in hf_grads[0].items())
    print(f"{len(grads[0])} gradients: largest relative error {error:.1e}")
    # --8<-- [end:demo]
