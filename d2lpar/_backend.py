"""The functions that d2lpar.torch and d2lpar.mxnet define in the same
words, written once against a backend object (framework-free).

Each framework has one backend object, ``BACKEND`` in
d2lpar/_torch/backend.py (`TorchBackend`) and d2lpar/_mxnet/backend.py
(`MXNetBackend`), and each backend module (d2lpar/torch.py,
d2lpar/mxnet.py) defines its own function of the same name around each
one here, with its docstring::

    @_backend.docstring_of(_backend.try_devices)
    def try_devices(num_devices):
        return _backend.try_devices(BACKEND, num_devices)

A backend object has the attributes ``framework`` and ``array_type`` and
the methods ``num_gpus``, ``cpu``, ``gpu_device``, ``stand_in``,
``stand_in_label``, ``stand_in_threads``, ``free_bytes``,
``synchronize``, ``to_arrays``, ``full``, ``copy_into``, ``copy_like``,
``flat``, ``memory``, ``device_of``, ``all_finite``, ``no_grad``,
``max_abs_diff``, ``normal``, ``zeros``, ``dot``, ``nbytes``, ``relu``
and ``concat``, each documented where it is defined. A function here
that needs functions of the backend module itself (`parameter_drift`:
``get_params``, ``train_batch``, ``try_devices``) takes them as
arguments, which the backend module passes at the time of the call, so
a test that replaces ``train_batch`` on a backend is seen by
`parameter_drift`.
"""
import math

from d2lpar import checks as _checks
from d2lpar import collectives as _collectives
from d2lpar import data as _data
from d2lpar import devices as _devices
from d2lpar import distributed as _distributed
from d2lpar import fonts as _fonts
from d2lpar import i18n as _i18n
from d2lpar import plots as _plots
from d2lpar import sharding as _sharding
from d2lpar import timing as _timing
from d2lpar.i18n import error_message


def docstring_of(fn):
    """Decorate a backend's function with the docstring of `fn`, its
    framework-free function here; it keeps its own name and signature."""
    def decorate(function):
        function.__doc__ = fn.__doc__
        return function
    return decorate


def prepare():
    """What a backend does when imported: register the CJK font with
    matplotlib, so that Chinese text shows in every plot of the lessons,
    their own plt calls included (d2lpar/fonts.py); in a Jupyter kernel,
    show figures as SVG (`plots.use_svg_display`: with the pinned
    matplotlib-inline 0.1.6 and IPython 9, a kernel shows a figure only
    as the text ``<Figure size ...>`` until a format is registered)."""
    _fonts.use_cjk_font()
    _plots.use_svg_display()


def check_allreduce(backend, data):
    """Check that `data` can be summed in place by `allreduce`: a list of
    same-shape, same-dtype, distinct arrays, one per device."""
    _checks.check_allreduce(data, memory_of=backend.memory,
                            device_of=backend.device_of)


def check_collective(backend, arrays, name, same_rows=True):
    """Check the input of the collective `name` (`reduce_scatter`,
    `all_gather`): a non-empty list of arrays, one per device."""
    _sharding.check_collective(arrays, name, backend.array_type,
                               lambda x: x.shape, same_rows=same_rows)


def check_finite(backend, params, epoch, lr):
    """Raise an error that names the epoch when `params` hold NaN or
    infinite values (training diverged), or when `lr` is not a finite
    number above 0; a lesson calls it after each epoch."""
    if not all(backend.all_finite(p) for p in params):
        raise _checks.diverged(epoch, lr)
    _checks.check_lr(lr)


def ring_allreduce(backend, data):
    """Like `allreduce`, but with the bandwidth-optimal ring algorithm:
    reduce-scatter, then all-gather, over chunks of the flattened data."""
    check_allreduce(backend, data)
    if len(data) == 1:
        return
    with backend.no_grad():
        flats = [backend.flat(x) for x in data]  # views: written in place
        for phase, i, j, start, end in _collectives.ring_steps(
                flats[0].shape[0], len(flats)):
            if phase == 'reduce-scatter':
                view = flats[j][start:end]
                view += backend.copy_like(flats[i][start:end], flats[j])
            else:
                backend.copy_into(flats[i][start:end], flats[j][start:end])


def gpu(backend, i=0):
    """The `i`-th GPU; a ValueError if this machine has no such GPU."""
    if not isinstance(i, int) or i < 0:
        raise TypeError(error_message(
            'A GPU index is an int >= 0, got {i!r}.', i=i))
    if i >= backend.num_gpus():
        raise ValueError(error_message(
            'There is no GPU {i}: this machine has {n} GPU(s). Use '
            'try_gpu({i}) to fall back to the CPU.', i=i,
            n=backend.num_gpus()))
    return backend.gpu_device(i)


def try_gpu(backend, i=0):
    """The `i`-th GPU if it exists, else the CPU."""
    return gpu(backend, i) if i < backend.num_gpus() else backend.cpu()


def try_all_gpus(backend):
    """All GPUs, or ``[cpu()]`` when there is none (never an empty list)."""
    return ([gpu(backend, i) for i in range(backend.num_gpus())]
            or [backend.cpu()])


def try_devices(backend, num_devices):
    """`num_devices` devices for a lesson: the first GPUs when there are
    enough, else `num_devices` CPU stand-ins (PyTorch: ``cpu:0``,
    ``cpu:1``, ..., each computing on a worker thread of its own, see
    `launch`; MXNet: the contexts ``cpu(0)``, ``cpu(1)``, ..., each with
    its own engine thread), saying once what it fell back to."""
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    if backend.num_gpus() >= num_devices:
        return [gpu(backend, i) for i in range(num_devices)]
    _i18n.say_once(_devices.fallback_notice(
        num_devices, backend.num_gpus(), backend.stand_in_threads(),
        ', '.join(backend.stand_in_label(i) for i in range(num_devices))))
    return [backend.stand_in(i) for i in range(num_devices)]


def copy_bandwidth(backend, device=None, num_bytes=1 << 26):
    """Memory-copy bandwidth of `device` (default: the first GPU, else
    the CPU) in bytes read plus written per second."""
    device = try_gpu(backend) if device is None else device
    return _timing.measure_copy_bandwidth(backend, device, num_bytes)


def products_that_fit(backend, num_products, shape, devices):
    """How many of `num_products` float32 results of `shape` fit, with
    their input matrix, into the free memory of every GPU among `devices`
    (keeping a tenth of it, at least 256 MiB, for the framework): all
    `num_products` on the CPU and on CPU stand-ins, fewer on a GPU with
    too little free memory (the book's 50 products of 4000x4000 keep
    3.2 GB of results on each GPU). A ValueError when not even one fits.
    The free memory is what the framework reports (PyTorch: the driver's
    ``torch.cuda.mem_get_info`` plus what its caching allocator holds
    unused; MXNet: ``mx.context.gpu_memory_info``)."""
    return _devices.products_that_fit(backend, num_products, shape,
                                      devices)


def measure_allreduce(backend, fns, sizes, device_counts, *, repeat=3):
    """Time each allreduce function of `fns` on `try_devices(k)` for each
    k in `device_counts` and each size in `sizes` (float32 numbers per
    device); see `plot_allreduce`."""
    rows = _timing.measure_allreduce(
        backend, fns, sizes, [try_devices(backend, k) for k in device_counts],
        repeat)
    for r in rows:  # what try_devices(k) gave: GPUs, or CPU stand-ins
        r['on'] = 'gpu' if backend.num_gpus() >= r['devices'] else 'cpu'
    return rows


def load_data_fashion_mnist(backend, batch_size, num_train=None,
                            num_test=None):
    """Iterators over Fashion-MNIST (train, test), from the cache folder
    `data_dir()`, downloading it when the network allows; offline, over a
    synthetic stand-in with the same shapes, saying so once. `num_train`
    and `num_test` keep only the first examples, for quick CPU runs."""
    X_tr, y_tr, X_te, y_te = _data.fashion_mnist_arrays(num_train,
                                                        num_test)[:4]
    return (_data.DataIter(X_tr, y_tr, batch_size, True, backend.to_arrays,
                           drop_last=True),
            _data.DataIter(X_te, y_te, batch_size, False, backend.to_arrays))


def parameter_drift(backend, params, batch_size, lr, *, get_params,
                    train_batch, try_devices, num_steps=20, num_train=None,
                    num_test=None):
    """Train two copies of `params` side by side with `train_batch`, one
    on the two devices of `try_devices(2)`, the other on the first of them
    alone (so both on GPUs or both on CPU stand-ins, never a GPU against
    stand-ins), on the minibatches that `train` sees with the same
    arguments, and return the largest absolute difference between the two
    sets of parameters after each of the first `num_steps` steps (see
    `plot_drift`)."""
    if (isinstance(num_steps, bool) or not isinstance(num_steps, int)
            or num_steps < 1):
        raise ValueError(error_message(
            'num_steps must be an int >= 1, got {num_steps!r}.',
            num_steps=num_steps))
    _checks.check_lr(lr)
    # The same loader as `train`: the same minibatches in the same order
    train_iter = load_data_fashion_mnist(backend, batch_size, num_train,
                                         num_test)[0]
    # Both runs on the same kind of device: with one GPU, try_devices(1)
    # would be the GPU and try_devices(2) two CPU stand-ins, whose kernels
    # round differently, so the drift would measure the kernels, not the
    # split
    two = try_devices(2)  # the backend's own, passed by its parameter_drift
    runs = [(devices, [get_params(params, d) for d in devices])
            for devices in (two[:1], two)]
    drift = []
    while len(drift) < num_steps:  # as many epochs as it takes
        for X, y in train_iter:
            for devices, device_params in runs:
                train_batch(X, y, device_params, devices=devices, lr=lr)
            one, two = runs[0][1][0], runs[1][1][0]  # first device's copy
            drift.append(max(backend.max_abs_diff(a, b)
                             for a, b in zip(one, two)))
            if len(drift) == num_steps:
                break
    return drift


def train_distributed(backend, num_workers, *, batch_size=256, lr=0.2,
                      num_epochs=2, num_train=None, num_test=None, port=None,
                      timeout=300, crash_at_step=None, use_gpus=None,
                      sharded=False, optimizer='sgd', pipelined=False,
                      checkpoint=False, fail_at_step=None,
                      max_restarts=0, amp=False, accumulate=1,
                      naive_accumulate=False):
    """Train the lesson's LeNet in `num_workers` processes on 127.0.0.1
    (PyTorch: DDP with gloo (nccl on GPUs) under torchrun; MXNet: the
    dist_sync KVStore with a scheduler and a server), each on its share of
    every global batch; print and return a `DistributedResult` with the
    times of every process. A crashed worker, a port in use or the
    `timeout` end the run with a RuntimeError, and no process is left
    behind; `crash_at_step` makes the last process fail on purpose.
    The processes train on GPUs when each can have one of its own, else
    on the CPU; `use_gpus` False puts them on the CPU in any case, True
    requires the GPUs. `sharded` True shards the model with FSDP in
    PyTorch; in MXNet it runs as many servers as workers, each holding the
    optimizer state of its part of the parameters. `optimizer` is 'sgd'
    or 'adam'. `pipelined` True trains lesson 5's pipeline MLP instead, in
    two GPipe stages, one per process, with torch.distributed.pipelining;
    '1f1b' with its 1F1B schedule (MXNet has no such tool:
    NotImplementedError). Runs to be compared use
    the same kind of device. `checkpoint`, `fail_at_step`,
    `max_restarts`: checkpoints and restarts; `amp`: mixed precision;
    `accumulate`: micro-batches per step, and `naive_accumulate` True to
    send the gradients after every micro-batch, as a naive loop does (see
    `d2lpar.distributed.train`)."""
    return _distributed.train(backend.framework, num_workers, batch_size, lr,
                              num_epochs, num_train, num_test, port, timeout,
                              crash_at_step, use_gpus=use_gpus,
                              sharded=sharded, optimizer=optimizer,
                              pipelined=pipelined, checkpoint=checkpoint,
                              fail_at_step=fail_at_step,
                              max_restarts=max_restarts, amp=amp,
                              accumulate=accumulate,
                              naive_accumulate=naive_accumulate)


def distributed_commands(backend, hosts, workers_per_host=1, *, port=29500,
                         out_dir='OUT', script_args=(), max_restarts=0):
    """The command lines that run the same training on the machines
    `hosts` (the first one coordinates), one line per command;
    `script_args`: options of the training script (``--epochs 1``);
    `max_restarts`: PyTorch's restarts after a failure."""
    return _distributed.command_for_machines(backend.framework, hosts,
                                             workers_per_host, port, out_dir,
                                             script_args, max_restarts)


# --------------------------------------------------------------------------
# The small models of the lessons (their arrays from the backend's
# ``normal``, ``zeros``, ``dot``, ``nbytes``, ``relu`` and ``concat``)
# --------------------------------------------------------------------------
MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def _he(backend, shape, num_inputs):
    # standard deviation sqrt(2 / inputs of one output) (He et al., 2015)
    return backend.normal(shape, (2 / num_inputs) ** 0.5)


def mlp_params(backend):
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1, W2 = _he(backend, (784, 256), 784), _he(backend, (256, 10), 256)
    return backend.concat([x.reshape(-1) for x in (
        W1, backend.zeros(256), W2, backend.zeros(10))])


def mlp(backend, X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    params, start = [], 0
    for shape in MLP_SHAPES:  # views of the vector, in order
        size = math.prod(shape)
        params.append(flat[start:start + size].reshape(shape))
        start += size
    W1, b1, W2, b2 = params
    H = backend.relu(backend.dot(X.reshape(X.shape[0], -1), W1) + b1)
    return backend.dot(H, W2) + b2


def held_bytes(backend, replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(backend.nbytes(x) for x in replica.values())


def pipeline_params(backend, width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        return [_he(backend, (n_in, n_out), n_in), backend.zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(backend, X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = backend.dot(X, params[i]) + params[i + 1]
        if not (last and i == len(params) - 2):
            X = backend.relu(X)
    return X

