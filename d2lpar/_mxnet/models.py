"""The small models of the lessons that the lessons do not define
themselves: the loss, SGD, and lesson 5's Adam and GPipe step (LeNet's
parameters, the MLP and the pipeline stages are written once for both
frameworks, in d2lpar/_backend.py)."""
from mxnet import autograd, gluon, np

from d2lpar import _backend
from d2lpar.sharding import gpipe_schedule, shard_bounds
from d2lpar._mxnet.backend import BACKEND

loss = gluon.loss.SoftmaxCrossEntropyLoss()


def adam(param, grad, moments, *, lr, step):
    """One Adam step (Kingma and Ba, 2015) on `param` in place, with its
    `moments` (m, v), also in place. Only elementwise operations: a shard
    of the vectors gets exactly the values of the whole."""
    m, v = moments
    m[:] = m * 0.9 + grad * 0.1
    v[:] = v * 0.999 + grad * grad * 0.001
    m_hat, v_hat = m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)
    param[:] = param - lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def gpipe_step(X, y, stage_params, *, devices, num_microbatches,
               timeline=None):
    """Forward and backward passes of one batch through the stages (stage
    s on devices[s]) in `num_microbatches` micro-batches, in the order of
    `gpipe_schedule`; gradients add up in each parameter's ``.grad``
    (attach them with ``grad_req='add'``). Returns the summed loss. MXNet's
    engine runs each device's work on its own thread; `timeline` watches
    every result."""
    k, m = len(devices), num_microbatches
    b = shard_bounds(len(X), m)
    fwd = [[None] * m for _ in range(k)]  # (input, output) of each stage
    bwd = [[None] * m for _ in range(k)]  # gradient of each stage's input
    losses = []
    watch = timeline.watch if timeline else (lambda a, label: a)
    for tick in gpipe_schedule(k, m):
        for s, kind, j in tick:
            if kind == 'F':
                x = X[b[j]:b[j + 1]] if s == 0 else fwd[s - 1][j][1]
                x = x.copyto(devices[s])
                x.attach_grad()
                with autograd.record():
                    out = _backend.stage_forward(BACKEND, x, stage_params[s],
                                                 last=s == k - 1)
                    if s == k - 1:  # the last stage ends with the loss
                        out = loss(out, y[b[j]:b[j + 1]].as_in_ctx(
                            devices[s])).sum() / len(X)
                fwd[s][j] = (x, watch(out, f'F{j}'))
            else:
                x, out = fwd[s][j]
                if s == k - 1:
                    out.backward()
                    losses.append(out)
                else:
                    out.backward(bwd[s + 1][j].as_in_ctx(devices[s]))
                bwd[s][j] = watch(x.grad, f'B{j}')
    return float(sum(float(l) for l in losses))


def sgd(params, lr, batch_size):
    """Minibatch stochastic gradient descent, as in the d2l book: each
    parameter takes a step of `lr` against its gradient divided by
    `batch_size`."""
    for param in params:
        param[:] = param - lr * param.grad / batch_size
