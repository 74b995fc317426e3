"""Tiny transformers 3.x fine-tuning job, written the way the Trainer's docs of the time showed:
a model built from a config (a 2-layer GPT-2, no download), a map-style dataset of dicts, and
``Trainer(model, args, train_dataset).train()``.

Per-batch step: transformers.trainer:Trainer.training_step (Trainer.train calls it once per
batch and adds what it returns to its running sum ``tr_loss``).
Works unchanged on transformers 3.1.0 and 3.2.0.
"""
import argparse
import tempfile
import warnings

import torch

warnings.filterwarnings("ignore")


class Sentences(torch.utils.data.Dataset):
    """``n`` token sequences of a tiny vocabulary; the labels are the inputs (causal LM)."""

    def __init__(self, n: int, length: int = 16, vocab: int = 64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def build(steps: int, output_dir: str, trainer_class=None):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_ctx=32, n_embd=32, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(output_dir=output_dir, max_steps=steps, per_device_train_batch_size=4,
                             learning_rate=1e-3, logging_steps=10_000, save_steps=10_000, no_cuda=True, disable_tqdm=True,
                             seed=0)
    return (trainer_class or Trainer)(model=model, args=args, train_dataset=Sentences(4 * steps))


def main(steps: int = 8, trainer_class=None):
    with tempfile.TemporaryDirectory() as out:
        trainer = build(steps, out, trainer_class)
        result = trainer.train()
    print("trained", result.global_step, "steps, mean loss", round(result.training_loss, 4))
    return trainer


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    main(ap.parse_args().steps)
