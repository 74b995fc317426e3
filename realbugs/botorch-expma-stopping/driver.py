"""Tiny BoTorch job: fit a SingleTaskGP's hyperparameters with BoTorch's torch optimizer
(fit_gpytorch_mll(..., optimizer=fit_gpytorch_mll_torch)), which runs
botorch.optim.core:torch_minimize with the default ExpMAStoppingCriterion.

Per-step call: the closure torch_minimize calls once per optimizer step
(botorch.optim.closures.core:ForwardBackwardClosure.__call__); the holder is the stopping
criterion it then calls (botorch.optim.stopping:ExpMAStoppingCriterion.evaluate).
Works unchanged on botorch 0.11.3 and 0.12.0.
"""
import argparse
import warnings

import torch

warnings.filterwarnings("ignore")


def build():
    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    torch.manual_seed(0)
    X = torch.rand(12, 2, dtype=torch.double)
    Y = (torch.sin(6 * X[:, :1]) + X[:, 1:] ** 2 + 0.05 * torch.randn(12, 1, dtype=torch.double))
    model = SingleTaskGP(X, Y)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    return model, mll


def main(steps: int = 4, callback=None):
    from botorch.fit import fit_gpytorch_mll
    from botorch.optim.fit import fit_gpytorch_mll_torch

    model, mll = build()
    kw = {"step_limit": steps}
    if callback is not None:
        kw["callback"] = callback
    fit_gpytorch_mll(mll, optimizer=fit_gpytorch_mll_torch, optimizer_kwargs=kw,
                     max_attempts=1)
    print("fitted; lengthscale", model.covar_module.base_kernel.lengthscale.detach().tolist()
          if hasattr(model.covar_module, "base_kernel") else model.covar_module.lengthscale.detach().tolist())
    return model


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    main(ap.parse_args().steps)
