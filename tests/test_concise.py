"""Concise training (lesson 3): ResNet-18, the learning-rate schedule, the
shards of every device, and `train_concise` on one and on two devices,
including its errors. That two devices reach the accuracy of one (within 2
points) is checked by the lesson itself, at its full CPU size, under nbval.
"""
import math
import os

import numpy as np
import psutil
import pytest

from d2lpar import training

SMALL = dict(num_train=1024, num_test=256, num_epochs=3, plot=False)


@pytest.mark.parametrize('width, count', [(64, 11175818), (8, 176634),
                                          (4, 44738)])
def test_resnet18_has_the_book_architecture(backend, width, count):
    net = backend.resnet18(num_classes=10, in_channels=1, width=width)
    assert sum(p.size for p in backend.trainable(net)) == count
    X = np.zeros((3, 1, 28, 28), np.float32)
    assert tuple(backend.output_shape(net, X)) == (3, 10)
    net3 = backend.resnet18(num_classes=5, in_channels=3, width=4)
    assert tuple(backend.output_shape(net3, np.zeros((2, 3, 32, 32),
                                                  np.float32))) == (2, 5)


def test_learning_rate_warms_up_then_decays_to_zero():
    lr, warmup, total = 0.4, 10, 50
    rates = [training.learning_rate(s, lr, warmup_steps=warmup,
                                    total_steps=total)
             for s in range(total)]
    np.testing.assert_allclose(rates[:warmup],
                               [lr * (s + 1) / warmup for s in range(warmup)])
    assert rates[warmup - 1] == pytest.approx(lr)
    assert rates[warmup] == pytest.approx(lr)  # the decay starts at the top
    assert all(a > b for a, b in zip(rates[warmup:], rates[warmup + 1:]))
    assert rates[-1] < lr * 0.01
    assert training.learning_rate(total, lr, warmup_steps=warmup,
                                  total_steps=total) == pytest.approx(0)
    assert training.learning_rate(0, lr, warmup_steps=0,
                                  total_steps=total) == lr  # no warm-up
    half = training.learning_rate(warmup + (total - warmup) // 2, lr,
                                  warmup_steps=warmup,
                                total_steps=total)
    assert half == pytest.approx(lr / 2)
    assert math.isfinite(training.learning_rate(0, lr, warmup_steps=0,
                                                total_steps=0))


@pytest.mark.parametrize('k', [1, 2, 4])
def test_shards_make_up_the_global_batch(k):
    n, B = 103, 16
    one = list(training.epoch_shards(n, B, seed=5))
    assert len(one) == n // B and all(len(b) == B for b in one)
    assert len(set(np.concatenate(one))) == (n // B) * B  # no repeats
    per_rank = [list(training.epoch_shards(n, B, rank=r, world_size=k, seed=5))
                for r in range(k)]
    for step, batch in enumerate(one):
        shards = [per_rank[r][step] for r in range(k)]
        assert all(len(s) == B // k for s in shards)
        np.testing.assert_array_equal(np.concatenate(shards), batch)
    assert [b.tolist() for b in training.epoch_shards(n, B, seed=5)] == \
        [b.tolist() for b in one]  # the same seed, the same order
    assert [b.tolist() for b in training.epoch_shards(n, B, seed=6)] != \
        [b.tolist() for b in one]


@pytest.mark.parametrize('kwargs, message', [
    (dict(batch_size=65), 'multiple of 2'),
    (dict(batch_size=1), 'multiple of 2'),
    (dict(num_train=100), 'make no batch of 128'),
    (dict(num_epochs=0), 'num_epochs'),
    (dict(batch_size=128.0), 'batch_size must be an integer'),
    (dict(warmup_epochs=3), 'warmup_epochs'),
])
def test_bad_arguments_are_refused_before_training(backend, kwargs,
                                                   message):
    args = dict(batch_size=128, lr=0.1, num_epochs=2, num_train=512,
                num_test=256, plot=False)
    args.update(kwargs)
    net = backend.resnet18(width=4)
    with pytest.raises(ValueError, match=message):
        backend.train_concise(net, backend.try_devices(2), **args)


@pytest.mark.parametrize('k', [1, 2])
def test_train_concise_trains_net_in_place(backend, k):
    backend.seed(0)
    net = backend.resnet18(width=4)
    before = backend.trainable(net)
    devices = backend.try_devices(k)
    # The same global batch on 1 and 2 devices: 16 steps an epoch, enough
    # for batch norm's running averages (momentum 0.1) to settle before
    # the first evaluation; 8 steps are not
    result = backend.train_concise(net, devices, batch_size=64, lr=0.1,
                                   warmup_epochs=0.5, **SMALL)
    assert result.devices == [str(d) for d in devices]
    assert result.num_epochs == 3 and len(result.test_accs) == 3
    assert result.num_examples == 1024 and result.sec_per_epoch > 0
    assert result.test_acc > 0.2  # ten classes: it learned something
    after = backend.trainable(net)
    assert any(not np.allclose(a, b) for a, b in zip(after, before))
    # The trained parameters are in `net`, ready to evaluate (PyTorch:
    # in evaluation mode): it gives the accuracy the run reported
    _, test_iter = backend.load_data_fashion_mnist(256, 1024, 256)
    assert not backend.in_training_mode(net)
    acc = backend.evaluate_accuracy(net, test_iter, devices[0])
    assert acc == pytest.approx(result.test_acc)


def _linear_net(backend):
    """A network with no batch normalization (whose per-device statistics
    would make k devices differ from one), drawn from a fixed seed."""
    backend.seed(1)
    return backend.linear_net()


def test_one_step_on_two_devices_equals_one_step_on_one(backend):
    """The same global batch gives the same update on 1 and 2 devices: each
    process applies the averaged gradient once, to its own copy (on CPU
    stand-ins too, where the processes could otherwise share memory)."""
    one_step = dict(num_train=128, num_test=256, num_epochs=1, plot=False)
    before = backend.trainable(_linear_net(backend))
    after = {}
    for k in (1, 2):
        net = _linear_net(backend)
        backend.train_concise(net, backend.try_devices(k), batch_size=128,
                              lr=0.5,
                              **one_step)
        after[k] = backend.trainable(net)
    moved = max(float(np.abs(a - b).max())
                for a, b in zip(after[1], before))
    assert moved > 1e-3  # the step did something
    for a, b in zip(after[2], after[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_failing_process_stops_the_run(backend):
    """A network that cannot take the images fails (PyTorch: in the
    worker processes); the error comes back, and no process is left."""
    net, expected = backend.failing_net()
    with pytest.raises(expected) as info:
        backend.train_concise(net, backend.try_devices(2), batch_size=64,
                              lr=0.1,
                              **SMALL)
    for message in backend.failure_messages:
        assert message in str(info.value)
    assert _training_processes() == []


def _training_processes():
    """Children started by torch.multiprocessing (not its long-lived
    resource tracker)."""
    return [p for p in psutil.Process(os.getpid()).children(recursive=True)
            if 'spawn_main' in ' '.join(p.cmdline())]


def test_a_message_cut_short_is_never_read(tmp_path):
    """PyTorch only: the training processes send their reports and the
    trained parameters in files. A process killed while writing one leaves
    a half-written file that the parent neither reads nor waits for (it
    then sees the process end); whole messages arrive in order."""
    import pickle

    from d2lpar._torch.processes import _Mailbox
    worker, parent = _Mailbox(str(tmp_path)), _Mailbox(str(tmp_path))
    worker.put(('epoch', 0, 0.5, 1.0))
    worker.put(('epoch', 1, 0.75, 1.0))
    state = pickle.dumps(('state', {'w': np.ones(1000)}))
    (tmp_path / '00000002.msg.part').write_bytes(state[:len(state) // 2])
    assert parent.take() == [('epoch', 0, 0.5, 1.0), ('epoch', 1, 0.75, 1.0)]
    assert parent.take() == []
    # had the process lived, it would have written the message whole
    worker.put(('state', {'w': np.ones(3)}))
    (kind, got), = parent.take()
    assert kind == 'state'
    np.testing.assert_array_equal(got['w'], np.ones(3))
    assert list(tmp_path.iterdir()) == []  # each message read once


def test_layers_defined_in_a_notebook_are_refused():
    """PyTorch only: MXNet trains in this process, where any class works."""
    from torch import nn
    from d2lpar import torch as d2l

    class Notebook(nn.Module):
        def forward(self, X):
            return X

    Notebook.__module__ = '__main__'
    net = nn.Sequential(Notebook(), nn.Flatten(), nn.Linear(784, 10))
    with pytest.raises(ValueError, match='Move it into a .py file'):
        d2l.train_concise(net, d2l.try_devices(2), batch_size=64, lr=0.1,
                          **SMALL)


def test_a_crash_on_the_way_out_after_the_run_is_done_is_only_reported(
        capsys):
    """PyTorch's teardown crash ("terminate called without an active
    exception", SIGABRT) can hit a process after rank 0 sent the trained
    state; the run is complete then. Any other failure stops the run."""
    pytest.importorskip('torch')
    import signal
    from d2lpar._torch import processes

    class Ended:
        def is_alive(self):
            return False

    class Procs:
        processes = [Ended(), Ended()]

    class Mailbox:
        def __init__(self, messages):
            self.messages = messages

        def take(self):
            messages, self.messages = self.messages, []
            return messages

    abort, kill = -signal.SIGABRT, -signal.SIGKILL
    state = {'w': 1}
    got = processes._after_teardown_crash(
        1, abort, Procs(), Mailbox([('state', state)]), print, None, wait=1)
    assert got is state
    assert 'rank 1 crashed while shutting down' in capsys.readouterr().out
    # Before the state arrived, or another failure: no state, the caller
    # stops the run with the error
    assert processes._after_teardown_crash(
        1, abort, Procs(), Mailbox([]), print, None, wait=1) is None
    assert processes._after_teardown_crash(
        1, kill, Procs(), Mailbox([('state', state)]), print, None,
        wait=1) is None
