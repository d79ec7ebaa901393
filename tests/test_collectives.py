"""allreduce, ring_allreduce, direct_allreduce and split_batch: exact sums
and shards on every device, and clear errors that leave the data untouched."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

REDUCES = ['allreduce', 'ring_allreduce', 'direct_allreduce']


def _values(shape, k, dtype, seed=0):
    """k arrays of `shape` whose sums are exact in float32 and int32."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, size=shape).astype(dtype)
            for _ in range(k)]


def _on_devices(backend, values, devices):
    return [backend.array(v, d) for v, d in zip(values, devices)]


def _check_summed(backend, data, values, devices):
    expected = np.sum(values, axis=0).astype(values[0].dtype)
    assert len(data) == len(devices)
    for x, d in zip(data, devices):
        got = backend.numpy(x)
        assert got.dtype == values[0].dtype
        assert got.shape == values[0].shape
        np.testing.assert_array_equal(got, expected)
        assert backend.is_on(x, d)


@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('dtype', ['float32', 'int32'])
@pytest.mark.parametrize('shape', [(7,), (3, 5), (1,), (2, 3, 4), (0,)])
@pytest.mark.parametrize('k', [1, 2, 3, 5])
def test_reduce_leaves_the_sum_on_every_device(backend, reduce, dtype,
                                               shape, k):
    devices = backend.try_devices(k)
    values = _values(shape, k, dtype)
    data = _on_devices(backend, values, devices)
    originals = list(data)
    assert getattr(backend, reduce)(data) is None
    # In place: the same array objects, summed
    assert all(x is o for x, o in zip(data, originals))
    _check_summed(backend, data, values, devices)


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_accepts_a_tuple(backend, reduce):
    devices = backend.try_devices(3)
    values = _values((4, 2), 3, 'float32')
    data = tuple(_on_devices(backend, values, devices))
    getattr(backend, reduce)(data)
    _check_summed(backend, data, values, devices)


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_the_gradients_of_get_params_copies(backend, reduce):
    """What train_batch reduces: the grads of per-device copies."""
    devices = backend.try_devices(3)
    params = [backend.array(np.ones((2, 3), np.float32))]
    copies = [backend.get_params(params, d) for d in devices]
    for i, (p,) in enumerate(copies):
        assert backend.is_on(p, devices[i])
    for i, (p,) in enumerate(copies):  # device i gets gradient i + 1
        backend.backward(lambda: (p * (i + 1)).sum())
    grads = [p.grad for (p,) in copies]
    getattr(backend, reduce)(grads)
    for (p,), d in zip(copies, devices):
        np.testing.assert_array_equal(backend.numpy(p.grad),
                                      np.full((2, 3), 6.0, np.float32))
        assert backend.is_on(p.grad, d)


# --------------------------------------------------------------------------
# Errors, which must leave the data as it was
# --------------------------------------------------------------------------
def _snapshot(backend, data):
    return [backend.numpy(x).copy() for x in data]


def _assert_unchanged(backend, data, before):
    for x, b in zip(data, before):
        np.testing.assert_array_equal(backend.numpy(x), b)


@pytest.mark.parametrize('reduce', REDUCES)
@pytest.mark.parametrize('arrays, error, match', [
    ([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32),
      np.ones((3, 2), np.float32)], ValueError,
     r'arrays of one shape.*\[\(2, 3\), \(2, 3\), \(3, 2\)\]'),
    ([np.ones(4, np.float32), np.ones(4, np.int32)], TypeError,
     r'arrays of one dtype.*float32.*int32')], ids=['shapes', 'dtypes'])
def test_reduce_of_different_shapes_or_dtypes(backend, reduce, arrays, error,
                                              match):
    devices = backend.try_devices(len(arrays))
    data = [backend.array(a, d) for a, d in zip(arrays, devices)]
    before = _snapshot(backend, data)
    with pytest.raises(error, match=match):
        getattr(backend, reduce)(data)
    _assert_unchanged(backend, data, before)


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_an_empty_list(backend, reduce):
    with pytest.raises(ValueError, match='empty list'):
        getattr(backend, reduce)([])


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_a_single_array_instead_of_a_list(backend, reduce):
    x = backend.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(TypeError, match='expects a list with one array per '
                       'device'):
        getattr(backend, reduce)(x)
    np.testing.assert_array_equal(backend.numpy(x),
                                  np.arange(6).reshape(2, 3))


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_the_same_array_twice(backend, reduce):
    devices = backend.try_devices(2)
    x, y = _on_devices(backend, _values((5,), 2, 'float32'), devices)
    data = [x, y, x]
    before = _snapshot(backend, data)
    with pytest.raises(ValueError, match=r'data\[0\] and data\[2\] share '
                       r'memory'):
        getattr(backend, reduce)(data)
    _assert_unchanged(backend, data, before)


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_two_arrays_sharing_memory(backend, reduce):
    """A second array object over the same memory (x.detach(), as a
    careless copy of a gradient would be) is counted twice just the same:
    with three copies of x allreduce would leave 4x instead of 3x."""
    x = backend.array(np.arange(4, dtype=np.float32))
    data = [x, backend.view(x), backend.view(x)]
    before = _snapshot(backend, data)
    with pytest.raises(ValueError, match=r'data\[0\] and data\[1\] share '
                       r'memory'):
        getattr(backend, reduce)(data)
    _assert_unchanged(backend, data, before)


@pytest.fixture
def mxnet_backend():
    from conftest import get_backend
    return get_backend('mxnet')


@pytest.fixture
def mxnet_spy(monkeypatch):
    """Records, in order, every wait for an MXNet array and every read of
    an array's data pointer, each with the array's handle."""
    import mxnet
    from mxnet.base import _LIB
    events = []
    wait, get_data = mxnet.nd.NDArray.wait_to_read, _LIB.MXNDArrayGetData

    def spy_wait(self):
        events.append(('wait', self.handle.value))
        return wait(self)

    def spy_get_data(handle, out):
        events.append(('pointer', handle.value))
        return get_data(handle, out)

    monkeypatch.setattr(mxnet.nd.NDArray, 'wait_to_read', spy_wait)
    monkeypatch.setattr(_LIB, 'MXNDArrayGetData', spy_get_data)
    return events


@pytest.mark.parametrize('reduce', REDUCES)
def test_mxnet_reads_a_data_pointer_only_after_waiting(mxnet_backend,
                                                        mxnet_spy, reduce):
    """Asking MXNet for the data pointer of an array that the engine has
    yet to allocate races with the engine (about 0.2% of freshly computed
    arrays came out corrupted). Arrays on one device are compared by their
    data pointers, so each must be waited for before its pointer is read."""
    device = mxnet_backend.cpu()
    data = [mxnet_backend.full(4096, i + 1.0, device) for i in range(3)]
    getattr(mxnet_backend, reduce)(data)
    pointers = [h for what, h in mxnet_spy if what == 'pointer']
    assert len(pointers) >= 3
    for handle in pointers:
        first = mxnet_spy.index(('pointer', handle))
        assert ('wait', handle) in mxnet_spy[:first], \
            'data pointer read before the array was ready'
    for x in data:
        np.testing.assert_array_equal(mxnet_backend.numpy(x),
                                      np.full(4096, 6.0))


@pytest.mark.parametrize('reduce', REDUCES)
def test_mxnet_sums_gradients_still_being_computed_without_waiting(
        mxnet_backend, mxnet_spy, reduce):
    """One array per device cannot share memory, so allreduce neither
    waits for them nor reads their data pointers: the backward pass of
    each device can still be running while its sum is queued (a wait here
    would be a hidden barrier, killing the overlap of lesson 2)."""
    mx_np = mxnet_backend.module.np
    devices = mxnet_backend.try_devices(2)
    big = [mx_np.ones((600, 600), ctx=d) for d in devices]
    for _ in range(2):  # warm up
        mxnet_backend.numpy(mx_np.dot(big[0], big[0]))
    data = []
    for i, d in enumerate(devices):
        x = big[i]
        for _ in range(20):  # queued, about 0.1 s of work per device
            x = mx_np.dot(x, big[i]) / 600
        data.append(x * (i + 1))
    del mxnet_spy[:]
    getattr(mxnet_backend, reduce)(data)
    assert mxnet_spy == []  # neither a wait nor a data pointer
    for x in data:
        np.testing.assert_allclose(mxnet_backend.numpy(x),
                                   np.full((600, 600), 3.0), rtol=1e-5)


def test_mxnet_direct_allreduce_sums_every_chunk_apart(mxnet_backend,
                                                      monkeypatch):
    """MXNet's engine orders operators by whole arrays, not slices: a sum
    written into a chunk of device c's array would hold up every other
    device's sum, which reads that array. So chunk c is summed into a
    buffer of its own, by an operator whose first input lies on device c
    (MXNet runs it on that device's engine thread)."""
    mx = mxnet_backend.module.mx
    memory = mxnet_backend.module.BACKEND.memory
    sums, add_n = [], mx.nd.add_n

    def spy(*parts, out):
        sums.append((parts, out))
        return add_n(*parts, out=out)

    monkeypatch.setattr(mx.nd, 'add_n', spy)
    devices = mxnet_backend.try_devices(4)
    values = _values((13,), 4, 'int32')
    data = _on_devices(mxnet_backend, values, devices)
    mxnet_backend.direct_allreduce(data)
    _check_summed(mxnet_backend, data, values, devices)
    ranges = [(memory(x)[1], memory(x)[1] + x.size * 4) for x in data]
    assert len(sums) == 4
    for c, (parts, out) in enumerate(sums):
        assert len(parts) == 4 and parts[0].ctx == out.ctx == devices[c]
        assert not any(lo <= memory(out)[1] < hi for lo, hi in ranges)


def test_direct_allreduce_twice_without_waiting(backend):
    """The buffers of the chunk sums are reused from call to call; the
    second call, queued at once, must not overwrite sums still in use."""
    devices = backend.try_devices(3)
    first, second = (_values((10, 3), 3, 'int32', seed) for seed in (1, 2))
    data1 = _on_devices(backend, first, devices)
    data2 = _on_devices(backend, second, devices)
    backend.direct_allreduce(data1)
    backend.direct_allreduce(data2)
    _check_summed(backend, data1, first, devices)
    _check_summed(backend, data2, second, devices)


@pytest.mark.parametrize('k,n', [(2, 12), (3, 12), (4, 13), (5, 7)])
def test_ring_allreduce_sends_2_k_minus_1_over_k_of_the_data(
        backend, monkeypatch, k, n):
    """The ring's selling point: every device sends 2(k-1)/k of the data
    (k-1 chunks in the reduce-scatter, k-1 in the all-gather), whatever k
    is, instead of the whole data k-1 times through one device."""
    devices = backend.try_devices(k)
    values = _values((n,), k, 'float32')
    data = _on_devices(backend, values, devices)
    sent = [0] * k
    framework = backend.module.BACKEND

    def counting(method):
        original = getattr(framework, method)

        def copy(src, *rest):
            sent[backend.sender(src, data)] += src.shape[0]
            return original(src, *rest)
        return copy

    for method in ('copy_like', 'copy_into'):
        monkeypatch.setattr(framework, method, counting(method))
    backend.ring_allreduce(data)
    _check_summed(backend, data, values, devices)
    assert sum(sent) == 2 * (k - 1) * n
    for count in sent:  # chunks of n // k or n // k + 1 elements
        assert 2 * (k - 1) * (n // k) <= count <= 2 * (k - 1) * -(-n // k)


def test_ring_allreduce_of_transposed_arrays(backend):
    devices = backend.try_devices(2)
    values = _values((3, 4), 2, 'float32')
    data = [backend.array(v, d).T for v, d in zip(values, devices)]
    before = _snapshot(backend, data)
    if backend.transpose_is_a_view:  # a view with strides: refused
        with pytest.raises(ValueError, match=r'contiguous.*\.contiguous\(\)'):
            backend.ring_allreduce(data)
        _assert_unchanged(backend, data, before)
    else:  # MXNet's .T is a contiguous copy
        backend.ring_allreduce(data)
        _check_summed(backend, data, [v.T for v in values], devices)


# --------------------------------------------------------------------------
# split_batch
# --------------------------------------------------------------------------
def _check_split(backend, X, y, X_np, y_np, devices):
    X_shards, y_shards = backend.split_batch(X, y, devices)
    assert len(X_shards) == len(y_shards) == len(devices)
    sizes = [len(s) for s in X_shards]
    assert sizes == [len(s) for s in y_shards]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1  # balanced
    for xs, ys, d in zip(X_shards, y_shards, devices):
        assert backend.is_on(xs, d)
        assert backend.is_on(ys, d)
    X_back = np.concatenate([backend.numpy(s) for s in X_shards])
    y_back = np.concatenate([backend.numpy(s) for s in y_shards])
    assert X_back.dtype == X_np.dtype and y_back.dtype == y_np.dtype
    np.testing.assert_array_equal(X_back, X_np)
    np.testing.assert_array_equal(y_back, y_np)
    return sizes


def test_split_batch_moves_features_and_labels_to_their_devices(backend):
    """The batch comes from the CPU; every shard, labels included, must
    move to its own device. PyTorch keeps the tensors of CPU stand-ins in
    the CPU's memory, where placement cannot be seen, so there the shards
    go to the `meta` device, which has no data but does have a name."""
    X = backend.array(np.ones((6, 2), np.float32))
    y = backend.array(np.arange(6, dtype=np.int32))
    devices = backend.named_devices()
    X_shards, y_shards = backend.split_batch(X, y, devices)
    where = [backend.device_of(s) for s in X_shards + y_shards]
    assert where == devices + devices


@pytest.mark.parametrize('n,k', [(12, 1), (12, 2), (12, 3), (7, 3), (7, 5),
                                 (5, 5), (13, 5)])
def test_split_batch(backend, n, k):
    X_np = np.arange(n * 6, dtype=np.float32).reshape(n, 1, 2, 3)
    y_np = np.arange(n, dtype=np.int32) % 10
    devices = backend.try_devices(k)
    sizes = _check_split(backend, backend.array(X_np), backend.array(y_np),
                         X_np, y_np, devices)
    assert sum(sizes) == n


def test_split_batch_of_mismatched_lengths(backend):
    X = backend.array(np.zeros((5, 3), np.float32))
    y = backend.array(np.zeros(4, np.int32))
    with pytest.raises(ValueError, match='X has 5 examples but y has 4'):
        backend.split_batch(X, y, backend.try_devices(2))


@pytest.mark.parametrize('n,k', [(2, 3), (4, 5), (1, 2)])
def test_split_batch_of_fewer_examples_than_devices(backend, n, k):
    X = backend.array(np.zeros((n, 3), np.float32))
    y = backend.array(np.zeros(n, np.int32))
    with pytest.raises(ValueError, match=f'Cannot split {n} examples over '
                       f'{k} devices: each device needs at least one '
                       f'example'):
        backend.split_batch(X, y, backend.try_devices(k))


def test_split_batch_over_no_device(backend):
    X = backend.array(np.zeros((4, 3), np.float32))
    y = backend.array(np.zeros(4, np.int32))
    with pytest.raises(ValueError, match='device list is empty'):
        backend.split_batch(X, y, [])
    with pytest.raises(TypeError, match='list of devices'):
        backend.split_batch(X, y, None)
    # A call that does not fit is Python's own error, about split_batch
    with pytest.raises(TypeError, match=r'split_batch\(\) missing'):
        backend.split_batch(X, y)
    # The check must not use up what the function then needs
    with pytest.raises(TypeError, match='list of devices'):
        backend.split_batch(X, y, iter(backend.try_devices(2)))


# --------------------------------------------------------------------------
# Properties over random shapes, dtypes and device counts
# --------------------------------------------------------------------------
dtypes = st.sampled_from(['float32', 'int32'])
shapes = array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


@given(n=st.integers(0, 12), k=st.integers(1, 5),
       feature_shape=array_shapes(min_dims=0, max_dims=2, max_side=4),
       dtype=dtypes, seed=st.integers(0, 2 ** 16))
def test_split_batch_property(backend, n, k, feature_shape, dtype, seed):
    X_np = _values((n,) + feature_shape, 1, dtype, seed)[0]
    y_np = _values((n,), 1, 'int32', seed + 1)[0]
    devices = backend.try_devices(k)
    X, y = backend.array(X_np), backend.array(y_np)
    if n < k:
        with pytest.raises(ValueError, match='at least one example'):
            backend.split_batch(X, y, devices)
    else:
        _check_split(backend, X, y, X_np, y_np, devices)


@pytest.mark.parametrize('reduce', REDUCES)
@given(shape=shapes, k=st.integers(1, 5), dtype=dtypes,
       seed=st.integers(0, 2 ** 16))
def test_reduce_property(backend, reduce, shape, k, dtype, seed):
    devices = backend.try_devices(k)
    values = _values(shape, k, dtype, seed)
    data = _on_devices(backend, values, devices)
    getattr(backend, reduce)(data)
    _check_summed(backend, data, values, devices)


@pytest.mark.parametrize('reduce', REDUCES)
def test_reduce_of_plain_numbers_names_what_it_got(backend, reduce):
    with pytest.raises(TypeError, match=r'data\[0\] is a float \(1.0\)'):
        getattr(backend, reduce)([1.0, 2.0])
