"""A plain ~50M-parameter training script (no framework, no step method): the subject of
``benchmarks/watch_script.py``. It prints the seconds its own loop took.

python benchmarks/train_script.py [--steps N] [--hidden H] [--layers L]
"""

import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--hidden", type=int, default=2048)
parser.add_argument("--layers", type=int, default=12)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
blocks = []
for _ in range(args.layers):
    blocks += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.GELU()]
model = torch.nn.Sequential(*blocks, torch.nn.Linear(args.hidden, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
params = sum(p.numel() for p in model.parameters())
total = 0.0
started = time.perf_counter()
for _ in range(args.steps):
    x = torch.randn(args.batch, args.hidden)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss.item()
print(f"params {params} loop seconds {time.perf_counter() - started:.4f}", flush=True)
