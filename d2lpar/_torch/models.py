"""The small models of the lessons that the lessons do not define
themselves: the loss, SGD, and lesson 5's Adam and GPipe step (LeNet's
parameters, the MLP and the pipeline stages are written once for both
frameworks, in d2lpar/_backend.py)."""
import torch
from torch import nn

from d2lpar import _backend
from d2lpar.sharding import gpipe_schedule
from d2lpar._torch.backend import BACKEND
from d2lpar._torch.devices import launch, synchronize

loss = nn.CrossEntropyLoss(reduction='none')


def adam(param, grad, moments, *, lr, step):
    """One Adam step (Kingma and Ba, 2015) on `param` in place, with its
    `moments` (m, v), also in place. Only elementwise operations: a shard
    of the vectors gets exactly the values of the whole."""
    m, v = moments
    with torch.no_grad():
        m.mul_(0.9).add_(grad * 0.1)
        v.mul_(0.999).add_(grad * grad * 0.001)
        m_hat, v_hat = m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)
        param.sub_(lr * m_hat / (v_hat.sqrt() + 1e-8))


def gpipe_step(X, y, stage_params, *, devices, num_microbatches,
               timeline=None):
    """Forward and backward passes of one batch through the stages (stage
    s on devices[s]) in `num_microbatches` micro-batches, in the order of
    `gpipe_schedule`; gradients add up in each parameter's ``.grad``.
    Returns the summed loss. (`timeline` is for MXNet, which needs it.)"""
    k, m = len(devices), num_microbatches
    X_parts, y_parts = X.tensor_split(m), y.tensor_split(m)
    fwd = [[None] * m for _ in range(k)]  # (input, output) of each stage
    bwd = [[None] * m for _ in range(k)]  # gradient of each stage's input
    losses = []

    def forward(s, j):
        def F_(previous):  # the name shows on the timeline
            x = previous if s == 0 else previous[1]
            x = x.detach().to(devices[s]).requires_grad_(s > 0)
            return x, _backend.stage_forward(BACKEND, x, stage_params[s],
                                             last=s == k - 1)
        F_.__name__ = f'F{j}'
        previous = X_parts[j] if s == 0 else fwd[s - 1][j]
        fwd[s][j] = launch(devices[s], F_, previous)

    def backward(s, j):
        def B_(pair, grad):
            x, out = pair
            if s == k - 1:  # the last stage starts from the loss
                l = loss(out, y_parts[j].to(out.device)).sum() / len(X)
                l.backward()
                losses.append(l.detach())
            else:
                out.backward(grad.to(out.device))
            return x.grad if s > 0 else None
        B_.__name__ = f'B{j}'
        grad = None if s == k - 1 else bwd[s + 1][j]
        bwd[s][j] = launch(devices[s], B_, fwd[s][j], grad)

    for tick in gpipe_schedule(k, m):
        for s, kind, j in tick:
            (forward if kind == 'F' else backward)(s, j)
    synchronize(devices)
    return float(sum(float(l) for l in losses))


def sgd(params, lr, batch_size):
    """Minibatch stochastic gradient descent, as in the d2l book: each
    parameter takes a step of `lr` against its gradient divided by
    `batch_size`, and its gradient is set to zero."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()
