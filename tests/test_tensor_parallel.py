"""Lesson 5: tensor parallelism with PyTorch's API
(d2lpar.distributed.tensor_parallel) in two real processes gives the
outputs of the lesson's from-scratch split (`tensor_parallel_mlp`) and
the gradients of the unsplit MLP, with half of each weight per process
and one allreduce in each pass."""
import pytest

torch = pytest.importorskip('torch')

from d2lpar.distributed import tensor_parallel  # noqa: E402
from d2lpar import torch as d2l  # noqa: E402

# float32 sums taken in another order: the results differ by rounding,
# about 1e-6 for outputs near 1, far below this bound on any CPU
BOUND = 1e-5


@pytest.fixture(scope='module')
def inputs():
    torch.manual_seed(0)
    flat = d2l.mlp_params()
    X = torch.randn(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    return X, y, flat


@pytest.fixture(scope='module')
def tp(inputs):
    return tensor_parallel.run(*inputs, timeout=180)


def _largest(a, b):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


def test_outputs_of_the_from_scratch_split(inputs, tp):
    X, y, flat = inputs
    W1, b1, W2, b2 = [p.reshape(s) for p, s in zip(
        flat.split([784 * 256, 256, 256 * 10, 10]), d2l.MLP_SHAPES)]
    devices = d2l.try_devices(2)
    ours = d2l.tensor_parallel_mlp(X, d2l.split_columns(W1, b1, devices),
                                   d2l.split_rows(W2, devices), b2=b2)
    for Y in ours:
        assert _largest(tp['output'], Y.cpu()) < BOUND
    assert tp['output'].shape == (64, 10)


def test_gradients_of_the_unsplit_mlp(inputs, tp):
    X, y, flat = inputs
    flat = flat.clone().requires_grad_()
    X = X.reshape(len(X), -1).clone().requires_grad_()
    loss = d2l.loss(d2l.mlp(X, flat), y).mean()
    loss.backward()
    assert abs(float(loss.detach()) - tp['loss']) < BOUND
    grads = [g.reshape(s) for g, s in zip(
        flat.grad.split([784 * 256, 256, 256 * 10, 10]), d2l.MLP_SHAPES)]
    for name, g in zip(['W1', 'b1', 'W2', 'b2'], grads):
        assert tp['grads'][name].shape == tuple(g.shape)
        assert _largest(tp['grads'][name], g) < BOUND, name
    assert _largest(tp['grads']['X'], X.grad) < BOUND


def test_each_process_holds_half_of_each_weight(tp):
    assert tp['shards'] == {'W1': [[784, 128]] * 2, 'b1': [[128]] * 2,
                            'W2': [[128, 10]] * 2, 'b2': [[10]] * 2}


def test_one_allreduce_forward_and_one_backward(tp):
    assert tp['allreduces'] == {'forward': 1, 'backward': 1}


def test_a_failed_run_says_so(inputs):
    X, y, flat = inputs
    with pytest.raises(RuntimeError, match='tensor-parallel run'):
        tensor_parallel.run(X[:, :, :14], y, flat, timeout=180)
