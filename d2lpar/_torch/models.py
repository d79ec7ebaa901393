"""The small models of the lessons that the lessons do not define
themselves: LeNet's parameters, the loss, and lesson 5's MLP, Adam and
pipeline stages."""
import math

import torch
from torch import nn
from torch.nn import functional as F

from d2lpar.sharding import gpipe_schedule
from d2lpar._torch.devices import launch, synchronize


def lenet_params():
    """Fresh parameters of the LeNet-style network, on the CPU: weights
    with standard deviation sqrt(2 / inputs of one output) (He et al.,
    2015), biases 0."""
    def init(shape, num_inputs):
        return torch.randn(size=shape) * (2 / num_inputs) ** 0.5

    return [init((20, 1, 3, 3), 9), torch.zeros(20),
            init((50, 20, 5, 5), 500), torch.zeros(50),
            init((800, 128), 800), torch.zeros(128),
            init((128, 10), 128), torch.zeros(10)]


loss = nn.CrossEntropyLoss(reduction='none')


MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def mlp_params():
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1 = torch.randn(784, 256) * (2 / 784) ** 0.5
    W2 = torch.randn(256, 10) * (2 / 256) ** 0.5
    return torch.cat([W1.reshape(-1), torch.zeros(256), W2.reshape(-1),
                      torch.zeros(10)])


def mlp(X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    sizes = [math.prod(shape) for shape in MLP_SHAPES]
    W1, b1, W2, b2 = [p.reshape(shape) for p, shape in zip(
        flat.split(sizes), MLP_SHAPES)]
    H = F.relu(X.reshape(X.shape[0], -1) @ W1 + b1)
    return H @ W2 + b2


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


def held_bytes(replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(x.numel() * x.element_size() for x in replica.values())


def pipeline_params(width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        return [torch.randn(n_in, n_out) * (2 / n_in) ** 0.5,
                torch.zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = X @ params[i] + params[i + 1]
        if not (last and i == len(params) - 2):
            X = F.relu(X)
    return X


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
            return x, stage_forward(x, stage_params[s], last=s == k - 1)
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
