"""Data-parallel training: k devices take the same step as one device, and
`train` learns the (stand-in) data set."""
import re
import time

import numpy as np
import pytest

LR = 0.1


def _batch(backend, n=12):
    """The first `n` test examples, always the same ones."""
    _, test_iter = backend.load_data_fashion_mnist(n, num_train=n,
                                                   num_test=n)
    return next(iter(test_iter))


def _params(backend, seed=0):
    backend.seed(seed)
    return backend.lenet_params()


def _as_numpy(backend, params):
    return [backend.numpy(p) for p in params]


def _step(backend, params, X, y, k, reduce='allreduce'):
    devices = backend.try_devices(k)
    device_params = [backend.get_params(params, d) for d in devices]
    backend.train_batch(X, y, device_params, devices=devices, lr=LR,
                        reduce=getattr(backend, reduce))
    for copy, d in zip(device_params, devices):
        assert all(backend.is_on(p, d) for p in copy)
    return [_as_numpy(backend, copy) for copy in device_params]


@pytest.mark.parametrize('reduce', ['allreduce', 'ring_allreduce'])
@pytest.mark.parametrize('k', [1, 2, 3])
def test_k_devices_take_the_same_step_as_one(backend, k, reduce):
    X, y = _batch(backend)
    params = _params(backend)
    before = _as_numpy(backend, params)
    (reference,) = _step(backend, params, X, y, 1)
    copies = _step(backend, params, X, y, k, reduce)
    # get_params copied: the parameters passed in are untouched
    for p, b in zip(params, before):
        np.testing.assert_array_equal(backend.numpy(p), b)
    # The step did something
    assert any(not np.allclose(r, b) for r, b in zip(reference, before))
    assert len(copies) == k
    for copy in copies:
        for got, want in zip(copy, reference):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for got, first in zip(copy, copies[0]):  # the devices agree exactly
            np.testing.assert_array_equal(got, first)


def _manual_sgd_step(backend, params, X, y):
    """p - lr * (gradient of the summed loss) / batch size, by hand."""
    ps = [backend.copy_with_grad(p) for p in params]
    backend.backward(lambda: backend.loss(backend.lenet(X, ps), y).sum())
    return [backend.numpy(p) - LR * backend.numpy(p.grad) / len(y)
            for p in ps]


@pytest.mark.parametrize('k', [1, 3])
def test_train_batch_is_an_sgd_step_on_the_mean_loss_of_the_batch(backend,
                                                                  k):
    X, y = _batch(backend)
    params = _params(backend, seed=1)
    want = _manual_sgd_step(backend, params, X, y)
    for copy in _step(backend, params, X, y, k):
        for got, w in zip(copy, want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize('num_params,num_devices', [(1, 2), (2, 1), (3, 2)])
def test_train_batch_with_a_params_list_per_device_of_the_wrong_length(
        backend, num_params, num_devices):
    X, y = _batch(backend)
    params = _params(backend)
    devices = backend.try_devices(num_devices)
    device_params = [backend.get_params(params, d)
                     for d in backend.try_devices(num_params)]
    before = [_as_numpy(backend, c) for c in device_params]
    # Silently training on part of the batch, or an AttributeError about
    # None deep inside allreduce, are both wrong: a clear ValueError is.
    with pytest.raises(ValueError, match='device') as error:
        backend.train_batch(X, y, device_params, devices=devices, lr=LR)
    assert str(num_params) in str(error.value)
    assert str(num_devices) in str(error.value)
    for copy, b in zip(device_params, before):
        for p, v in zip(copy, b):
            np.testing.assert_array_equal(backend.numpy(p), v)


@pytest.mark.parametrize('num_gpus,num_devices', [(2, 1), (1, 2)])
def test_train_with_devices_that_num_gpus_does_not_count(backend, num_gpus,
                                                         num_devices):
    """train(num_gpus=2, devices=[one]) would train on one device and
    report it as a two-device run: it says what to pass instead."""
    devices = backend.try_devices(num_devices)
    with pytest.raises(ValueError, match=rf'train\(num_gpus={num_gpus}\) '
                       rf'got a devices list of length {num_devices}: pass '
                       rf'a list of {num_gpus} devices'):
        backend.train(num_gpus, 64, LR, num_epochs=1, num_train=128,
                      num_test=64, plot=False, devices=devices)


def _constant_net(backend, cls, device=None):
    """LeNet whose last layer ignores its input and always says `cls`,
    with its parameters on `device` (default: the CPU)."""
    params = _params(backend)
    params[6] = backend.array(np.zeros((128, 10), np.float32))
    b = np.zeros(10, np.float32)
    b[cls] = 1.0
    params[7] = backend.array(b)
    if device is not None:
        params = backend.get_params(params, device)
    return lambda X: backend.lenet(X, params)


@pytest.mark.parametrize('cls', [0, 7])
def test_evaluate_accuracy_of_a_constant_net(backend, cls):
    _, test_iter = backend.load_data_fashion_mnist(64, num_train=64,
                                                   num_test=230)
    labels = np.concatenate([backend.numpy(y) for _, y in test_iter])
    assert len(labels) == 230  # the last, partial batch counts too
    want = np.mean(labels == cls)
    assert 0 < want < 1
    net = _constant_net(backend, cls)
    assert backend.evaluate_accuracy(net, test_iter, backend.cpu()) == \
        pytest.approx(want)
    # By default it computes on try_gpu(): the first GPU if there is one
    # (the net's parameters must be there too), else the CPU
    device = backend.try_gpu()
    net = _constant_net(backend, cls, device)
    assert backend.evaluate_accuracy(net, test_iter) == pytest.approx(want)
    assert backend.evaluate_accuracy(net, test_iter, device) == \
        pytest.approx(want)


@pytest.mark.parametrize('num_gpus', [1, 2])
def test_train(backend, num_gpus, capsys):
    backend.seed(0)
    start = time.perf_counter()
    result = backend.train(num_gpus=num_gpus, batch_size=64, lr=0.2,
                           num_epochs=2, num_train=2000, num_test=500,
                           params=backend.lenet_params(), plot=False)
    wall = time.perf_counter() - start
    assert isinstance(result, backend.TrainResult)
    assert result.test_acc > 0.3  # chance is 0.1
    assert result.test_acc == result.test_accs[-1]
    assert len(result.test_accs) == result.num_epochs == 2
    assert all(0 <= a <= 1 for a in result.test_accs)
    assert result.devices == [str(d) for d in backend.try_devices(num_gpus)]
    assert len(result.devices) == num_gpus
    # the epochs' training time is timed, and is part of the whole call
    assert 0 < result.sec_per_epoch * result.num_epochs < wall
    assert result.num_examples == 2000 // 64 * 64  # last partial batch dropped
    text = str(result)
    assert text.startswith('test acc:')
    assert re.fullmatch(r'test acc: \d\.\d\d, \d+\.\d sec/epoch on \[.*\]',
                        text), text
    assert text in capsys.readouterr().out


def test_train_on_devices_given_by_name():
    """PyTorch takes a device by name ('cpu') wherever it takes a device:
    so does d2l.train, which waits for the GPUs among its devices."""
    from conftest import get_backend
    backend = get_backend('torch')
    backend.seed(0)
    result = backend.train(num_gpus=1, batch_size=64, lr=0.2, num_epochs=1,
                           num_train=256, num_test=128,
                           params=backend.lenet_params(), plot=False,
                           devices=['cpu'])
    assert result.devices == ['cpu'] and len(result.test_accs) == 1


def test_train_with_ring_allreduce(backend):
    backend.seed(0)
    result = backend.train(num_gpus=3, batch_size=64, lr=0.2, num_epochs=1,
                           num_train=640, num_test=200,
                           params=backend.lenet_params(),
                           reduce=backend.ring_allreduce, plot=False)
    assert len(result.devices) == 3
    assert result.num_examples == 640
    assert len(result.test_accs) == 1
    assert result.test_acc > 0.15
