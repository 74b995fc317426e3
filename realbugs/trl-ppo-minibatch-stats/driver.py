"""Tiny TRL PPO job (the trl 0.4 API of its README): a 1-layer GPT-2 with a value head,
offline tokenizer built in memory, one PPOTrainer.step over a batch of N query/response
pairs with mini_batch_size=1, so `step` runs N PPO minibatches.

Per-minibatch step: trl.trainer.ppo_trainer:PPOTrainer.train_minibatch (PPOTrainer.step calls
it once per minibatch and appends what it returns to its local list `all_stats`).
`--steps N` = number of minibatches in the PPO step.  Works unchanged on trl 0.4.0 and 0.4.1.
"""
import argparse
import warnings

import torch

warnings.filterwarnings("ignore")


def make_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>", "<eos>"] + [f"w{i}" for i in range(29)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   eos_token="<eos>")


def build(steps: int):
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

    torch.manual_seed(0)
    tokenizer = make_tokenizer()
    cfg = GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                     bos_token_id=2, eos_token_id=2, pad_token_id=0)
    model = AutoModelForCausalLMWithValueHead(GPT2LMHeadModel(cfg))
    ref_model = AutoModelForCausalLMWithValueHead(GPT2LMHeadModel(cfg))
    config = PPOConfig(batch_size=steps, mini_batch_size=1, ppo_epochs=1, learning_rate=1e-4,
                       seed=0)
    trainer = PPOTrainer(config, model, ref_model, tokenizer)
    queries = [tokenizer(f"w{i} w{i+1} w{i+2}", return_tensors="pt").input_ids[0] for i in range(steps)]
    responses = [torch.tensor([3 + (i % 7), 4 + (i % 5), 5 + (i % 3), 2]) for i in range(steps)]
    scores = [torch.tensor(float(i % 2)) for i in range(steps)]
    return trainer, queries, responses, scores


def main(steps: int = 4):
    trainer, queries, responses, scores = build(steps)
    stats = trainer.step(queries, responses, scores)
    print("ppo/loss/total", stats["ppo/loss/total"], "minibatches", steps)
    return trainer


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    main(ap.parse_args().steps)
