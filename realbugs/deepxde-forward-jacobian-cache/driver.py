"""Tiny DeepXDE PINN with the PyTorch backend and forward-mode autodiff
(dde.config.set_default_autodiff("forward"), new in 1.12.0): solve y' = cos(x) on [0, 2]
with y(0) = 0.

Per-step method: deepxde.model:Model._train_step (Model._train_sgd calls it once per iteration;
it runs the closure `train_step` that Model._compile_pytorch builds).
Works unchanged on deepxde 1.12.0 and 1.12.1.
"""
import argparse
import os

os.environ.setdefault("DDE_BACKEND", "pytorch")

import deepxde as dde  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def ode(x, y):
    dy_x = dde.grad.jacobian(y, x, i=0, j=0)
    if isinstance(dy_x, tuple):  # forward mode returns (value, function)
        dy_x = dy_x[0]
    return dy_x - torch.cos(x)


def build():
    dde.config.set_default_autodiff("forward")
    torch.manual_seed(0)
    np.random.seed(0)
    geom = dde.geometry.Interval(0, 2)
    ic = dde.icbc.DirichletBC(geom, lambda x: 0 * x[:, 0:1],
                              lambda x, on_boundary: on_boundary and np.isclose(x[0], 0))
    data = dde.data.PDE(geom, ode, [ic], num_domain=16, num_boundary=2, num_test=8)
    net = dde.nn.FNN([1, 16, 16, 1], "tanh", "Glorot uniform")
    model = dde.Model(data, net)
    model.compile("adam", lr=1e-3)
    return model


def main(steps: int = 4, callbacks=()):
    model = build()
    model.train(iterations=steps, display_every=10 ** 6, callbacks=list(callbacks))
    print("trained", model.train_state.step, "steps, loss", model.train_state.loss_train)
    return model


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    main(ap.parse_args().steps)
