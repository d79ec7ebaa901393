"""The small models of the lessons that the lessons do not define
themselves: LeNet's parameters, the loss, and lesson 5's MLP, Adam and
pipeline stages."""
import math

from mxnet import autograd, gluon, np, npx

from d2lpar.sharding import gpipe_schedule, shard_bounds


def lenet_params():
    """Fresh parameters of the LeNet-style network, on the CPU: weights
    with standard deviation sqrt(2 / inputs of one output) (He et al.,
    2015), biases 0."""
    def init(shape, num_inputs):
        return np.random.normal(scale=(2 / num_inputs) ** 0.5, size=shape)

    return [init((20, 1, 3, 3), 9), np.zeros(20),
            init((50, 20, 5, 5), 500), np.zeros(50),
            init((800, 128), 800), np.zeros(128),
            init((128, 10), 128), np.zeros(10)]


loss = gluon.loss.SoftmaxCrossEntropyLoss()


MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def mlp_params():
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1 = np.random.normal(scale=(2 / 784) ** 0.5, size=(784, 256))
    W2 = np.random.normal(scale=(2 / 256) ** 0.5, size=(256, 10))
    return np.concatenate([W1.reshape(-1), np.zeros(256), W2.reshape(-1),
                           np.zeros(10)])


def mlp(X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    ends = np.cumsum(np.array([math.prod(s) for s in MLP_SHAPES])).tolist()
    W1, b1, W2, b2 = [flat[int(e - math.prod(s)):int(e)].reshape(s)
                      for e, s in zip(ends, MLP_SHAPES)]
    H = npx.relu(np.dot(X.reshape(X.shape[0], -1), W1) + b1)
    return np.dot(H, W2) + b2


def adam(param, grad, moments, *, lr, step):
    """One Adam step (Kingma and Ba, 2015) on `param` in place, with its
    `moments` (m, v), also in place. Only elementwise operations: a shard
    of the vectors gets exactly the values of the whole."""
    m, v = moments
    m[:] = m * 0.9 + grad * 0.1
    v[:] = v * 0.999 + grad * grad * 0.001
    m_hat, v_hat = m / (1 - 0.9 ** step), v / (1 - 0.999 ** step)
    param[:] = param - lr * m_hat / (np.sqrt(v_hat) + 1e-8)


def held_bytes(replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(x.size * x.dtype.itemsize for x in replica.values())


def pipeline_params(width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        W = np.random.normal(scale=(2 / n_in) ** 0.5, size=(n_in, n_out))
        return [W, np.zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = np.dot(X, params[i]) + params[i + 1]
        if not (last and i == len(params) - 2):
            X = npx.relu(X)
    return X


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
                    out = stage_forward(x, stage_params[s], last=s == k - 1)
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
