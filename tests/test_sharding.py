"""Lesson 5: reduce_scatter and all_gather (exact, any k and length, clear
errors, inputs untouched), ZeRO-1..3 from scratch (the parameters of data
parallelism, the memory of the formula), tensor parallelism (the outputs
of the unsplit layers), the GPipe schedule and its bubble, activation
recomputation (the bytes kept, the forward passes, the gradient)."""
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from d2lpar import sharding
from frameworks import get_backend

LABEL = 'int64'  # what the data loaders give (torch needs Long labels)


def _float_arrays(backend, shape, k, seed=0):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(shape).astype('float32') for _ in range(k)]
    devices = backend.try_devices(k)
    return values, [backend.array(v, d) for v, d in zip(values, devices)]


@pytest.mark.parametrize('k', [1, 2, 3, 4, 5])
@pytest.mark.parametrize('shape', [(7,), (1,), (10, 3), (2, 3, 2)])
def test_all_gather_of_reduce_scatter_is_allreduce(backend, k, shape):
    values, data = _float_arrays(backend, shape, k)
    shards = backend.reduce_scatter(data)
    gathered = backend.all_gather(shards)
    # Every device gets an array of its own, not a shard or another's
    assert len({id(a) for a in gathered + shards + data}) == 3 * k
    for x, v in zip(data, values):  # the inputs are untouched
        np.testing.assert_array_equal(backend.numpy(x), v)
    backend.allreduce(data)
    devices = backend.try_devices(k)
    for g, x, d in zip(gathered, data, devices):
        assert backend.is_on(g, d)
        np.testing.assert_array_equal(backend.numpy(g), backend.numpy(x))


@given(n=st.integers(1, 40), k=st.integers(1, 5))
def test_shards_are_those_of_array_split(backend, n, k):
    values, data = _float_arrays(backend, (n,), k, seed=n)
    shards = backend.reduce_scatter(data)
    total = values[0].copy()
    for v in values[1:]:
        total = total + v  # float32, in the order of the devices
    expected = np.array_split(total, k)
    assert len(shards) == k
    for s, e, d in zip(shards, expected, backend.try_devices(k)):
        assert backend.is_on(s, d)
        np.testing.assert_array_equal(backend.numpy(s), e)


def test_shard_bounds_cut_as_array_split():
    for n, k in itertools.product(range(12), range(1, 6)):
        b = sharding.shard_bounds(n, k)
        sizes = [len(c) for c in np.array_split(np.arange(n), k)]
        assert [b[i + 1] - b[i] for i in range(k)] == sizes


@pytest.mark.parametrize('name', ['reduce_scatter', 'all_gather'])
def test_collectives_refuse_bad_input(backend, name):
    fn = getattr(backend, name)
    devices = backend.try_devices(2)
    with pytest.raises(ValueError, match='empty list'):
        fn([])
    with pytest.raises(TypeError, match='float'):
        fn(3.0)
    with pytest.raises(TypeError, match='item 0 is a int'):
        fn([1, 2])
    scalar = [backend.array(np.array(1.0, 'float32'), d) for d in devices]
    with pytest.raises(ValueError, match='at least one axis'):
        fn(scalar)
    a = backend.array(np.ones((4, 2), 'float32'), devices[0])
    b = backend.array(np.ones((4, 3), 'float32'), devices[1])
    with pytest.raises(ValueError, match=r'\(4, 2\), \(4, 3\)'):
        fn([a, b])
    np.testing.assert_array_equal(backend.numpy(a), np.ones((4, 2)))
    # The lessons' code does not check: the package's copy does, whether
    # the list comes by position or by name, and says which function
    keyword = {'reduce_scatter': 'data', 'all_gather': 'shards'}[name]
    with pytest.raises(ValueError, match=f'{name} got an empty list'):
        fn(**{keyword: []})
    c = backend.array(np.ones((4, 2), 'float32'), devices[1])
    assert len(fn(**{keyword: [a, c]})) == 2
    with pytest.raises(TypeError, match=name):  # Python's own error
        fn([a, c], [a, c])


def test_reduce_scatter_needs_equal_rows_all_gather_does_not(backend):
    devices = backend.try_devices(2)
    a = backend.array(np.ones((3, 2), 'float32'), devices[0])
    b = backend.array(np.ones((2, 2), 'float32'), devices[1])
    with pytest.raises(ValueError, match='same shape'):
        backend.reduce_scatter([a, b])
    gathered = backend.all_gather([a, b])
    assert backend.numpy(gathered[1]).shape == (5, 2)


def _seeded_params(backend):
    backend.seed_np(0)
    return backend.mlp_params()


def _whole(backend, replicas, stage):
    if stage < 3:
        return backend.numpy(replicas[0]['params'])
    return np.concatenate([backend.numpy(r['params']) for r in replicas])


@pytest.mark.parametrize('k', [2, 3])
def test_zero_takes_the_steps_of_data_parallelism(backend, k):
    flat = _seeded_params(backend)
    devices = backend.try_devices(k)
    rng = np.random.default_rng(1)
    batches = [(backend.array(rng.standard_normal((30, 1, 28, 28)).astype(
        'float32')), backend.array(rng.integers(0, 10, 30).astype(LABEL)))
        for _ in range(3)]
    results = {}
    for stage in range(4):
        replicas = backend.zero_replicas(flat, devices, stage)
        for step, (X, y) in enumerate(batches, start=1):
            backend.zero_step(X, y, replicas, devices=devices, lr=0.01,
                              step=step, stage=stage)
        results[stage] = _whole(backend, replicas, stage)
        for r in replicas:  # what each device keeps: the formula's bytes
            expected = sum(backend.zero_memory(len(flat), k, stage).values())
            assert abs(backend.held_bytes(r) - expected) <= 16
    start = backend.numpy(flat)
    assert not np.array_equal(results[0], start)  # training moved them
    for stage in (1, 2, 3):
        np.testing.assert_array_equal(results[stage], results[0])


def test_zero_memory_gives_the_papers_figures():
    # Rajbhandari et al. (2020), table 1: 7.5 B parameters, 64 GPUs, K = 12
    gb = [sum(sharding.zero_memory(7.5e9, 64, s, bytes_per=sharding.MIXED_ADAM)
              .values()) / 1e9 for s in range(4)]
    assert [round(g, 1) for g in gb] == [120.0, 31.4, 16.6, 1.9]
    with pytest.raises(ValueError, match='stage'):
        sharding.zero_memory(10, 2, 4)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_tensor_parallel_mlp_equals_the_unsplit_layers(backend, k):
    rng = np.random.default_rng(2)
    W1, b1 = rng.standard_normal((12, 7)), rng.standard_normal(7)
    W2, b2 = rng.standard_normal((7, 5)), rng.standard_normal(5)
    X = rng.standard_normal((4, 12))
    W1, b1, W2, b2, X = [backend.array(a.astype('float32'))
                         for a in (W1, b1, W2, b2, X)]
    devices = backend.try_devices(k)
    outputs = backend.tensor_parallel_mlp(
        X, backend.split_columns(W1, b1, devices),
        backend.split_rows(W2, devices), b2=b2)
    x, w1, c1, w2, c2 = [backend.numpy(a) for a in (X, W1, b1, W2, b2)]
    expected = np.maximum(x @ w1 + c1, 0) @ w2 + c2
    assert len(outputs) == k
    for Y, d in zip(outputs, devices):
        assert backend.is_on(Y, d)
        np.testing.assert_allclose(backend.numpy(Y), expected, rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize('k,m', [(1, 1), (2, 4), (3, 2), (4, 8)])
def test_gpipe_schedule_and_its_bubble(k, m):
    ticks = sharding.gpipe_schedule(k, m)
    work = [w for tick in ticks for w in tick]
    assert sorted(work) == sorted(itertools.product(range(k), 'BF',
                                                    range(m)))
    when = {w: t for t, tick in enumerate(ticks) for w in tick}
    for s, j in itertools.product(range(k), range(m)):
        if s:  # a stage computes after the one before it
            assert when[s, 'F', j] > when[s - 1, 'F', j]
            assert when[s - 1, 'B', j] > when[s, 'B', j]
        assert when[s, 'B', j] > when[s, 'F', j]
    for tick in ticks:  # a stage does one thing at a time
        assert len({s for s, _, _ in tick}) == len(tick)
    idle = k * len(ticks) - len(work)
    assert idle / (k * len(ticks)) == pytest.approx(
        sharding.bubble_fraction(k, m))



@pytest.mark.parametrize('k,m,v', [(1, 3, 2), (2, 4, 1), (2, 4, 2),
                                   (2, 6, 3), (3, 6, 2), (4, 8, 2),
                                   (4, 8, 4), (4, 12, 3)])
def test_interleaved_schedule_and_its_bubble(k, m, v):
    """Every pass of every chunk once, each after the pass it needs, one
    pass per device and tick, chunk c on device c % k; the idle slots
    counted are exactly the formula (k - 1) / (v m + k - 1)."""
    from fractions import Fraction
    ticks = sharding.interleaved_schedule(k, m, v)
    work = [(kind, j, c) for tick in ticks for _d, kind, j, c in tick]
    assert sorted(work) == sorted(itertools.product('BF', range(m),
                                                    range(k * v)))
    when = {(kind, j, c): t for t, tick in enumerate(ticks)
            for _d, kind, j, c in tick}
    for j, c in itertools.product(range(m), range(k * v)):
        if c:
            assert when['F', j, c] > when['F', j, c - 1]
        if c < k * v - 1:
            assert when['B', j, c] > when['B', j, c + 1]
        assert when['B', j, c] > when['F', j, k * v - 1]
    for tick in ticks:
        assert len({d for d, _, _, _ in tick}) == len(tick)
        assert all(d == c % k for d, _, _, c in tick)
    slots = k * len(ticks)
    idle = slots - len(work)
    assert Fraction(idle, slots) == Fraction(k - 1, v * m + k - 1)
    assert sharding.bubble_fraction(k, m, v) == pytest.approx(
        (k - 1) / (v * m + k - 1))


@pytest.mark.parametrize('k,m', [(1, 1), (2, 4), (3, 2), (4, 8)])
def test_interleaved_schedule_with_one_chunk_is_gpipe(k, m):
    gpipe = [sorted(tick) for tick in sharding.gpipe_schedule(k, m)]
    one = [sorted((d, kind, j) for d, kind, j, _c in tick)
           for tick in sharding.interleaved_schedule(k, m, 1)]
    assert one == gpipe


@pytest.mark.parametrize('k,m,v', [(2, 3, 2), (2, 4, 0), (2, 4, 1.5)])
def test_interleaved_schedule_refuses_what_it_cannot_lay_out(k, m, v):
    with pytest.raises(ValueError):
        sharding.interleaved_schedule(k, m, v)

def test_gpipe_step_gives_the_gradients_of_the_whole_batch(backend):
    devices = backend.try_devices(2)
    _seeded_params(backend)
    stages = [[backend.array(backend.numpy(p), d) for p in params]
              for params, d in zip(backend.pipeline_params(width=16),
                                   devices)]
    for params in stages:
        for p in params:
            backend.attach_grad(p, grad_req='add')
    rng = np.random.default_rng(3)
    x = rng.standard_normal((10, 1, 28, 28)).astype('float32')
    y = rng.integers(0, 10, 10).astype(LABEL)
    backend.gpipe_step(backend.array(x), backend.array(y), stages,
                       devices=devices, num_microbatches=3)
    grads = [backend.numpy(p.grad) for params in stages for p in params]
    # The same model in NumPy, on the whole batch
    w = [backend.numpy(p) for params in stages for p in params]
    h, acts = x.reshape(10, -1), []
    for i in range(0, 8, 2):
        acts.append(h)
        h = h @ w[i] + w[i + 1]
        if i < 6:
            h = np.maximum(h, 0)
    p = np.exp(h - h.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d = p
    d[np.arange(10), y] -= 1
    d /= 10
    for i in reversed(range(0, 8, 2)):
        np.testing.assert_allclose(grads[i], acts[i // 2].T @ d, atol=1e-5)
        np.testing.assert_allclose(grads[i + 1], d.sum(axis=0), atol=1e-5)
        d = (d @ w[i].T) * (acts[i // 2] > 0)


def test_mxnet_has_no_pipeline_tool():
    from d2lpar import mxnet as d2l
    with pytest.raises(NotImplementedError, match='pipeline tool'):
        d2l.train_distributed(2, pipelined=True)


def test_the_scripts_pipeline_stages_hold_pipeline_params():
    import torch
    from d2lpar.distributed import pipeline_train
    from d2lpar import torch as d2l
    torch.manual_seed(0)
    expected = d2l.pipeline_params()
    stages = pipeline_train.pipeline_stages(0)
    for stage, params in zip(stages, expected):
        got = list(stage.parameters())
        assert len(got) == len(params)
        for a, b in zip(got, params):
            assert torch.equal(a.detach(), b)
    X = torch.randn(5, 1, 28, 28)
    H = d2l.stage_forward(X, expected[0])
    assert torch.allclose(stages[1](stages[0](X)),
                          d2l.stage_forward(H, expected[1], last=True))


def test_torch_pipelining_takes_the_step_of_gpipe_step(monkeypatch):
    """Two processes run torch.distributed.pipelining's ScheduleGPipe
    (gloo) on the pipeline MLP: its first loss and its parameters after
    step 1 are those of d2l.gpipe_step and one SGD step on the same batch."""
    import torch
    from d2lpar import distributed
    from d2lpar import torch as d2l
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    lr, n = 0.2, 512
    piped = distributed.train('torch', 2, batch_size=128, lr=lr,
                              num_epochs=1, num_train=n, num_test=256,
                              timeout=180, use_gpus=False, pipelined=True)
    assert len(piped.summary['losses']) == n // 128
    assert all(np.isfinite(piped.summary['losses']))
    # GPipe: each stage holds the activations of all m = 4 micro-batches
    assert piped.summary['schedule'] == 'gpipe'
    assert [p['activations_in_flight'] for p in piped.processes] == [4, 4]
    devices = d2l.try_devices(2)
    torch.manual_seed(0)
    ours = [[p.to(d).requires_grad_() for p in params]
            for params, d in zip(d2l.pipeline_params(), devices)]
    X_train, y_train = d2l.fashion_mnist_arrays(n, 256)[:2]
    idx = piped.processes[0]['first_shard_of_epoch'][0]
    assert piped.processes[1]['first_shard_of_epoch'][0] == idx
    X, y = torch.from_numpy(X_train[idx]), torch.from_numpy(y_train[idx])
    loss = d2l.gpipe_step(X, y, ours, devices=devices, num_microbatches=4)
    assert loss == pytest.approx(piped.summary['losses'][0], abs=1e-5)
    before = [p.detach().clone() for params in ours for p in params]
    d2l.sgd([p for params in ours for p in params], lr, 1)
    theirs = piped.first_step_params()
    assert sorted(theirs) == ['0.0', '0.1', '0.2', '0.3',
                              '1.0', '1.1', '1.2', '1.3']
    flat = [p for params in ours for p in params]
    for s, params in enumerate(ours):
        for i, p in enumerate(params):
            np.testing.assert_allclose(theirs[f'{s}.{i}'],
                                       p.detach().cpu().numpy(), atol=1e-5)
    # and the step moved the parameters (a test of something)
    assert max(float((a - b.detach().cpu()).abs().max())
               for a, b in zip(before, flat)) > 1e-3



def test_torch_1f1b_takes_the_same_step_with_fewer_activations(
        monkeypatch):
    """Schedule1F1B in two processes: the loss and the parameters after
    step 1 of d2l.gpipe_step and one SGD step on the same batch (within
    1e-5), with at most min(k, m) = 2 micro-batches of activations held
    by a stage (stage 0 holds 2, the last stage 1), counted in the run."""
    import torch
    from d2lpar import distributed
    from d2lpar import torch as d2l
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    lr, n, k, m = 0.2, 512, 2, 4
    run = distributed.train('torch', 2, batch_size=128, lr=lr,
                            num_epochs=1, num_train=n, num_test=256,
                            timeout=180, use_gpus=False, pipelined='1f1b')
    assert run.summary['schedule'] == '1f1b'
    held = [p['activations_in_flight'] for p in run.processes]
    assert held == [2, 1]
    assert max(held) == min(k, m)
    devices = d2l.try_devices(2)
    torch.manual_seed(0)
    ours = [[p.to(d).requires_grad_() for p in params]
            for params, d in zip(d2l.pipeline_params(), devices)]
    X_train, y_train = d2l.fashion_mnist_arrays(n, 256)[:2]
    idx = run.processes[0]['first_shard_of_epoch'][0]
    X, y = torch.from_numpy(X_train[idx]), torch.from_numpy(y_train[idx])
    loss = d2l.gpipe_step(X, y, ours, devices=devices, num_microbatches=m)
    assert loss == pytest.approx(run.summary['losses'][0], abs=1e-5)
    d2l.sgd([p for params in ours for p in params], lr, 1)
    theirs = run.first_step_params()
    for s, params in enumerate(ours):
        for i, p in enumerate(params):
            np.testing.assert_allclose(theirs[f'{s}.{i}'],
                                       p.detach().cpu().numpy(), atol=1e-5)


def test_pipelined_takes_a_known_schedule():
    from d2lpar import distributed
    with pytest.raises(ValueError, match='1f1b'):
        distributed.train('torch', 2, pipelined='zb')

def test_mxnet_servers_hold_the_optimizer_state_in_shards(monkeypatch):
    """Adam on one server and on two (sharded=True): the same parameters
    after step 1 and the same accuracy; no worker holds optimizer state;
    the servers' states add up to Adam's 8 bytes per parameter, the two
    servers each hold a part, and each holds twice the bytes of the
    weights it updates."""
    from d2lpar import distributed
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    settings = dict(batch_size=128, lr=0.01, num_epochs=1, num_train=512,
                    num_test=256, timeout=180, use_gpus=False,
                    optimizer='adam')
    one = distributed.train('mxnet', 2, **settings)
    two = distributed.train('mxnet', 2, sharded=True, **settings)
    first, second = one.first_step_params(), two.first_step_params()
    for name in first:
        np.testing.assert_allclose(first[name], second[name], atol=1e-5)
    assert abs(one.test_acc - two.test_acc) <= 0.02
    num_params = sum(a.size for a in first.values())
    for run, k in ((one, 1), (two, 2)):
        assert [p['optimizer_bytes'] for p in run.processes] == [0, 0]
        assert all(p['parameter_bytes'] == 4 * num_params
                   for p in run.processes)
        held = [s['optimizer_bytes'] for s in run.servers]
        assert len(held) == k and sum(held) == 8 * num_params
        assert all(0 < b < 8 * num_params for b in held) or k == 1
        for s in run.servers:
            assert s['optimizer_bytes'] == 2 * s['parameter_bytes']
    # a large weight is cut among the servers: both hold a part of it
    parts = [{key for key, b in s['keys'].items()} for s in two.servers]
    assert parts[0] & parts[1]


def test_collective_seconds():
    t = sharding.collective_seconds('allreduce', 3e9, 8, bandwidth=450e9)
    assert t == pytest.approx(2 * 7 * 3e9 / 8 / 450e9)
    assert sharding.collective_seconds('all_gather', 8, 4, bandwidth=1.0,
                                       latency=1.0) == 9.0
    with pytest.raises(ValueError, match='kind'):
        sharding.collective_seconds('broadcast', 1, 2, bandwidth=1.0)


def test_all_to_all_by_hand():
    # 4 devices, 8 bytes each, 1 byte/s, 1 s per message: 3 steps, each
    # a message of 8/4 = 2 bytes: 3 * (1 + 2) = 9 s
    assert sharding.collective_seconds('all_to_all', 8, 4, bandwidth=1.0,
                                       latency=1.0) == 9.0
    # 8 H100 over NVLink 4, 134,217,728 bytes of tokens per device:
    # 7 * 3.4e-6 + 7/8 * 134217728 / 450e9 = 23.8 + 260.979 = 284.779 us
    t = sharding.collective_seconds('all_to_all', 134217728, 8,
                                    bandwidth=450e9, latency=3.4e-6)
    assert t == pytest.approx(7 * 3.4e-6 + 7 / 8 * 134217728 / 450e9)
    assert t == pytest.approx(284.779e-6, rel=1e-5)
    # half an allreduce, and nothing to send on one device
    assert t == pytest.approx(sharding.collective_seconds(
        'allreduce', 134217728, 8, bandwidth=450e9, latency=3.4e-6) / 2)
    assert sharding.collective_seconds('all_to_all', 100, 1,
                                       bandwidth=1.0, latency=1.0) == 0


@pytest.mark.parametrize('kind, num_bytes, k, field', [
    ('all-to-all', 8, 4, 'kind'), ('alltoall', 8, 4, 'all_to_all'),
    ('all_to_all', 8, 0, 'num_devices'), ('allreduce', 8, 2.5, 'num_devices'),
    ('all_to_all', -1, 4, 'num_bytes'), ('all_gather', '8', 4, 'num_bytes')])
def test_a_collective_of_bad_input_is_a_clear_error(kind, num_bytes, k,
                                                     field):
    with pytest.raises(ValueError, match=field):
        sharding.collective_seconds(kind, num_bytes, k, bandwidth=1.0)


@pytest.mark.parametrize('k, m, expected', [(1, 4, 0.0), (2, 4, 0.2),
                                            (4, 4, 3 / 7), (4, 16, 3 / 19)])
def test_the_bubble_of_a_few_schedules_by_hand(k, m, expected):
    assert sharding.bubble_fraction(k, m) == pytest.approx(expected)


@pytest.mark.parametrize('k, m', [(0, 4), (2, 0), (1.5, 4)])
def test_a_bubble_of_no_schedule_is_a_clear_error(k, m):
    with pytest.raises(ValueError, match='num_stages and num_microbatches'):
        sharding.bubble_fraction(k, m)


def test_fsdp_keeps_half_of_what_ddp_keeps(monkeypatch):
    """DDP and FSDP (fully_shard) in two processes with Adam: each FSDP
    process keeps exactly half the bytes of parameters, gradients and
    optimizer state of a DDP process (every LeNet tensor has an even
    number of rows), as d2l.zero_memory says for stages 0 and 3, k = 2;
    and FSDP's profiled pass saw all-gathers and layers computing."""
    from d2lpar import distributed
    from d2lpar import torch as d2l
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    settings = dict(batch_size=256, lr=0.01, num_epochs=1, num_train=512,
                    num_test=256, use_gpus=False, optimizer='adam')
    ddp = distributed.train('torch', 2, **settings)
    fsdp = distributed.train('torch', 2, sharded=True, **settings)
    n = sum(a.size for a in ddp.first_step_params().values())
    keys = {'parameters': 'parameter_bytes', 'gradients': 'gradient_bytes',
            'optimizer': 'optimizer_bytes'}
    for run, stage in [(ddp, 0), (fsdp, 3)]:
        formula = d2l.zero_memory(n, 2, stage)  # fp32 with Adam
        for p in run.processes:
            assert {part: p[key] for part, key in keys.items()} == formula
    for p in fsdp.processes:
        assert p['seconds_all_gather'] > 0 and p['seconds_layers'] > 0
        assert 0 <= p['seconds_overlap'] <= p['seconds_all_gather']


def _recomputation_batch(backend, n=64):
    """A batch of `n` random images (float32) and labels (int64)."""
    rng = np.random.default_rng(0)
    return (backend.array(rng.standard_normal((n, 784)).astype('float32')),
            backend.array(rng.integers(0, 10, n).astype(LABEL)))


def test_recomputation_takes_the_plain_steps_gradient(backend):
    """recomputation_step (the lesson's #@save function): the MLP runs
    once without recomputation, twice with it, and both steps give the
    gradient of the mean loss, computed here without the function."""
    flat = _seeded_params(backend)
    X, y = _recomputation_batch(backend)
    plain = backend.recomputation_step(X, y, flat, recompute=False)
    again = backend.recomputation_step(X, y, flat, recompute=True)
    assert (plain[1], again[1]) == (1, 2)
    assert plain[2] >= 0 and again[2] >= 0  # seconds
    p = backend.copy_with_grad(flat)
    backend.backward(lambda: backend.loss(backend.mlp(X, p), y).mean())
    expected = backend.numpy(p.grad)
    for step in (plain, again):
        np.testing.assert_allclose(backend.numpy(step[3]), expected,
                                   rtol=0, atol=1e-6)
    np.testing.assert_array_equal(backend.numpy(flat),
                                  backend.numpy(_seeded_params(backend)))


def test_recomputation_keeps_less_and_computes_again():
    """PyTorch: the tensors that autograd saves for the backward pass,
    counted by the hook of recomputation_step, byte for byte: without
    recomputation the input, the hidden layer, the log-softmax of the
    output, the labels and the loss's 4-byte total weight; with it, all
    but the hidden layer. The parameters are never counted."""
    from d2lpar import torch as d2l
    tb = get_backend('torch')
    flat = _seeded_params(tb)
    n = 64
    X, y = _recomputation_batch(tb, n)
    plain = d2l.recomputation_step(X, y, flat, recompute=False)
    again = d2l.recomputation_step(X, y, flat, recompute=True)
    hidden = n * 256 * 4
    others = n * 784 * 4 + n * 10 * 4 + n * 8 + 4
    assert (plain[0], again[0]) == (others + hidden, others)


def test_mxnet_recomputation_keeps_only_its_input():
    """MXNet: the recomputing step keeps X and the labels between its
    passes, counted in bytes, nothing else (not the parameters); the
    plain step's arrays stay inside autograd's graph, uncounted (None)."""
    from d2lpar import mxnet as d2l
    mb = get_backend('mxnet')
    flat = _seeded_params(mb)
    n = 64
    X, y = _recomputation_batch(mb, n)
    plain = d2l.recomputation_step(X, y, flat, recompute=False)
    again = d2l.recomputation_step(X, y, flat, recompute=True)
    assert plain[0] is None
    assert again[0] == n * 784 * 4 + n * 8
