"""The functions that d2lpar.torch and d2lpar.mxnet define in the same
words, written once against the backend module `d2l` (framework-free).

Each backend binds them in one line, ``gpu = bind(_backend.gpu, __name__)``
(or a group at once: `device_functions`, `shared_functions`,
`model_functions`), and supplies the few private hooks they call:

- devices (d2lpar/_torch/devices.py, d2lpar/_mxnet/devices.py):
  ``_gpu_device(i)``, ``_stand_in(i)``, ``_stand_in_label(i)``,
  ``_stand_in_threads()``, ``_free_bytes(device)``, ``_to_arrays(X, y)``,
  ``_full(n, value, device)``, ``_copy_into(src, dst)``;
- arrays (d2lpar/_torch/arrays.py, d2lpar/_mxnet/arrays.py, imported by
  the backend module): ``_FRAMEWORK``, ``_ARRAY``, ``_no_grad()``,
  ``_all_finite(x)``, ``_memory(x)``, ``_device_of(x)``, ``_flat(x)``,
  ``_copy_like(src, dst)``, ``_copy_into(src, dst)``; and in the backend
  module itself, ``_max_abs_diff(a, b)``;
- models (d2lpar/_torch/models.py, d2lpar/_mxnet/models.py):
  ``_normal(shape, std)``, ``_zeros(n)``, ``_dot(X, W)``, ``_nbytes(x)``
  (and the public ``relu`` and ``concat`` of the arrays modules).

The backend is looked up when a function is called, so a test that
replaces ``train_batch`` on a backend is seen by `parameter_drift`.
Both backends also take the framework-free names they re-export from here
(``from d2lpar._backend import *``: the names of `__all__`).
"""
import functools
import inspect
import math
import sys

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
from d2lpar import training as _training
from d2lpar._timer import Timer  # noqa: F401
from d2lpar.api import *  # noqa: F401,F403 (api.SHARED, as they are)
from d2lpar.api import SHARED
from d2lpar.checks import (  # noqa: F401 (the checks lessons call)
    check_devices, check_replicas, check_split)
from d2lpar.i18n import error_message

# What `from d2lpar._backend import *` gives a backend: the shared names of
# its __all__ (d2lpar/api.py), the checks its lesson code calls, and Timer.
__all__ = SHARED + ['Timer', 'check_devices', 'check_replicas',
                    'check_split']


def bind(fn, module_name):
    """`fn` with its first parameter, the backend module, filled in: same
    name, docstring and signature (less that parameter)."""
    @functools.wraps(fn)
    def bound(*args, **kwargs):
        return fn(sys.modules[module_name], *args, **kwargs)

    signature = inspect.signature(fn)
    bound.__signature__ = signature.replace(
        parameters=list(signature.parameters.values())[1:])
    bound.__module__ = module_name
    return bound


def device_functions(module_name):
    """`gpu`, `try_gpu`, `try_all_gpus`, `try_devices`, `copy_bandwidth`,
    `products_that_fit`, `measure_allreduce` and `load_data_fashion_mnist`
    bound to the backend module `module_name` (its devices module)."""
    return [bind(fn, module_name) for fn in (
        gpu, try_gpu, try_all_gpus, try_devices, copy_bandwidth,
        products_that_fit, measure_allreduce, load_data_fashion_mnist)]


def prepare(module_name):
    """What a backend does when imported: register the CJK font with
    matplotlib, so that Chinese text shows in every plot of the lessons,
    their own plt calls included (d2lpar/fonts.py); in a Jupyter kernel,
    show figures as SVG (`plots.use_svg_display`: with the pinned
    matplotlib-inline 0.1.6 and IPython 9, a kernel shows a figure only
    as the text ``<Figure size ...>`` until a format is registered);
    return the backend module, which its generated part calls ``d2l``,
    as the lessons do."""
    _fonts.use_cjk_font()
    _plots.use_svg_display()
    return sys.modules[module_name]


def check_allreduce(d2l, data):
    """Check that `data` can be summed in place by `allreduce`: a list of
    same-shape, same-dtype, distinct arrays, one per device."""
    _checks.check_allreduce(data, memory_of=d2l._memory,
                            device_of=d2l._device_of)


def check_collective(d2l, arrays, name, same_rows=True):
    """Check the input of the collective `name` (`reduce_scatter`,
    `all_gather`): a non-empty list of arrays, one per device."""
    _sharding.check_collective(arrays, name, d2l._ARRAY,
                               lambda x: x.shape, same_rows=same_rows)


def check_finite(d2l, params, epoch, lr):
    """Raise an error that names the epoch when `params` hold NaN or
    infinite values (training diverged), or when `lr` is not a finite
    number above 0; a lesson calls it after each epoch."""
    if not all(d2l._all_finite(p) for p in params):
        raise _checks.diverged(epoch, lr)
    _checks.check_lr(lr)


def ring_allreduce(d2l, data):
    """Like `allreduce`, but with the bandwidth-optimal ring algorithm:
    reduce-scatter, then all-gather, over chunks of the flattened data."""
    d2l.check_allreduce(data)
    if len(data) == 1:
        return
    with d2l._no_grad():
        flats = [d2l._flat(x) for x in data]  # views: written in place
        for phase, i, j, start, end in _collectives.ring_steps(
                flats[0].shape[0], len(flats)):
            if phase == 'reduce-scatter':
                view = flats[j][start:end]
                view += d2l._copy_like(flats[i][start:end], flats[j])
            else:
                d2l._copy_into(flats[i][start:end], flats[j][start:end])


def shared_functions(module_name):
    """`check_allreduce`, `check_collective`, `check_finite`,
    `ring_allreduce`, `parameter_drift`, `train_distributed` and
    `distributed_commands` bound to the backend module `module_name`."""
    return [bind(fn, module_name) for fn in (
        check_allreduce, check_collective, check_finite, ring_allreduce,
        parameter_drift, train_distributed, distributed_commands)]


def gpu(d2l, i=0):
    """The `i`-th GPU; a ValueError if this machine has no such GPU."""
    if not isinstance(i, int) or i < 0:
        raise TypeError(error_message(
            'A GPU index is an int >= 0, got {i!r}.', i=i))
    if i >= d2l.num_gpus():
        raise ValueError(error_message(
            'There is no GPU {i}: this machine has {n} GPU(s). Use '
            'try_gpu({i}) to fall back to the CPU.', i=i, n=d2l.num_gpus()))
    return d2l._gpu_device(i)


def try_gpu(d2l, i=0):
    """The `i`-th GPU if it exists, else the CPU."""
    return d2l.gpu(i) if i < d2l.num_gpus() else d2l.cpu()


def try_all_gpus(d2l):
    """All GPUs, or ``[cpu()]`` when there is none (never an empty list)."""
    return [d2l.gpu(i) for i in range(d2l.num_gpus())] or [d2l.cpu()]


def try_devices(d2l, num_devices):
    """`num_devices` devices for a lesson: the first GPUs when there are
    enough, else `num_devices` CPU stand-ins (PyTorch: ``cpu:0``,
    ``cpu:1``, ..., each computing on a worker thread of its own, see
    `launch`; MXNet: the contexts ``cpu(0)``, ``cpu(1)``, ..., each with
    its own engine thread), saying once what it fell back to."""
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    if d2l.num_gpus() >= num_devices:
        return [d2l.gpu(i) for i in range(num_devices)]
    _i18n.say_once(_devices.fallback_notice(
        num_devices, d2l.num_gpus(), d2l._stand_in_threads(),
        ', '.join(d2l._stand_in_label(i) for i in range(num_devices))))
    return [d2l._stand_in(i) for i in range(num_devices)]


def copy_bandwidth(d2l, device=None, num_bytes=1 << 26):
    """Memory-copy bandwidth of `device` (default: the first GPU, else
    the CPU) in bytes read plus written per second."""
    device = d2l.try_gpu() if device is None else device
    x, y = [d2l._full(num_bytes // 4, 1.0, device) for _ in range(2)]

    def copy():
        d2l._copy_into(x, y)
        return num_bytes

    return _timing.measure_copy_bandwidth_with(copy, d2l.synchronize)


def products_that_fit(d2l, num_products, shape, devices):
    """How many of `num_products` float32 results of `shape` fit, with
    their input matrix, into the free memory of every GPU among `devices`
    (keeping a tenth of it, at least 256 MiB, for the framework): all
    `num_products` on the CPU and on CPU stand-ins, fewer on a GPU with
    too little free memory (the book's 50 products of 4000x4000 keep
    3.2 GB of results on each GPU). A ValueError when not even one fits.
    The free memory is what the framework reports (PyTorch: the driver's
    ``torch.cuda.mem_get_info`` plus what its caching allocator holds
    unused; MXNet: ``mx.context.gpu_memory_info``)."""
    return _devices.products_that_fit_with(d2l._free_bytes, num_products,
                                          shape, devices)


def measure_allreduce(d2l, fns, sizes, device_counts, *, repeat=3):
    """Time each allreduce function of `fns` on `try_devices(k)` for each
    k in `device_counts` and each size in `sizes` (float32 numbers per
    device); see `plot_allreduce`."""
    def make_data(k, n):  # zeros: no overflow, however often summed
        return [d2l._full(n, 0.0, device) for device in d2l.try_devices(k)]

    rows = _timing.measure_allreduce_with(
        make_data, d2l.synchronize, fns, sizes, device_counts, repeat)
    for r in rows:  # what try_devices(k) gave: GPUs, or CPU stand-ins
        r['on'] = 'gpu' if d2l.num_gpus() >= r['devices'] else 'cpu'
    return rows


def load_data_fashion_mnist(d2l, batch_size, num_train=None, num_test=None):
    """Iterators over Fashion-MNIST (train, test), from the cache folder
    `data_dir()`, downloading it when the network allows; offline, over a
    synthetic stand-in with the same shapes, saying so once. `num_train`
    and `num_test` keep only the first examples, for quick CPU runs."""
    return _data.load_data_fashion_mnist_with(
        d2l._to_arrays, batch_size, num_train, num_test)


def parameter_drift(d2l, params, batch_size, lr, *, num_steps=20,
                    num_train=None, num_test=None):
    """Train two copies of `params` side by side with `train_batch`, one
    on the two devices of `try_devices(2)`, the other on the first of them
    alone (so both on GPUs or both on CPU stand-ins, never a GPU against
    stand-ins), on the minibatches that `train` sees with the same
    arguments, and return the largest absolute difference between the two
    sets of parameters after each of the first `num_steps` steps (see
    `plot_drift`)."""
    return _training.parameter_drift_with(
        d2l.load_data_fashion_mnist, d2l.try_devices, d2l.get_params,
        d2l.train_batch, d2l._max_abs_diff, params, batch_size, lr,
        num_steps, num_train, num_test)


def train_distributed(d2l, num_workers, *, batch_size=256, lr=0.2,
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
    return _distributed.train(d2l._FRAMEWORK, num_workers, batch_size, lr,
                              num_epochs, num_train, num_test, port, timeout,
                              crash_at_step, use_gpus=use_gpus,
                              sharded=sharded, optimizer=optimizer,
                              pipelined=pipelined, checkpoint=checkpoint,
                              fail_at_step=fail_at_step,
                              max_restarts=max_restarts, amp=amp,
                              accumulate=accumulate,
                              naive_accumulate=naive_accumulate)


def distributed_commands(d2l, hosts, workers_per_host=1, *, port=29500,
                         out_dir='OUT', script_args=(), max_restarts=0):
    """The command lines that run the same training on the machines
    `hosts` (the first one coordinates), one line per command;
    `script_args`: options of the training script (``--epochs 1``);
    `max_restarts`: PyTorch's restarts after a failure."""
    return _distributed.command_for_machines(d2l._FRAMEWORK, hosts,
                                             workers_per_host, port, out_dir,
                                             script_args, max_restarts)


# --------------------------------------------------------------------------
# The small models of the lessons (their arrays from the hooks ``_normal``,
# ``_zeros``, ``_dot`` and ``_nbytes`` of d2lpar/_torch/models.py and
# d2lpar/_mxnet/models.py, and ``relu`` and ``concat``)
# --------------------------------------------------------------------------
MLP_SHAPES = ((784, 256), (256,), (256, 10), (10,))


def _he(d2l, shape, num_inputs):
    # standard deviation sqrt(2 / inputs of one output) (He et al., 2015)
    return d2l._normal(shape, (2 / num_inputs) ** 0.5)


def lenet_params(d2l):
    """Fresh parameters of the LeNet-style network, on the CPU: weights
    with standard deviation sqrt(2 / inputs of one output) (He et al.,
    2015), biases 0."""
    return [_he(d2l, (20, 1, 3, 3), 9), d2l._zeros(20),
            _he(d2l, (50, 20, 5, 5), 500), d2l._zeros(50),
            _he(d2l, (800, 128), 800), d2l._zeros(128),
            _he(d2l, (128, 10), 128), d2l._zeros(10)]


def mlp_params(d2l):
    """The parameters of an MLP with one hidden layer, in one flat vector:
    weights drawn with standard deviation sqrt(2 / inputs), zero biases."""
    W1, W2 = _he(d2l, (784, 256), 784), _he(d2l, (256, 10), 256)
    return d2l.concat([x.reshape(-1)
                       for x in (W1, d2l._zeros(256), W2, d2l._zeros(10))])


def mlp(d2l, X, flat):
    """The MLP of `mlp_params`, its parameters read from the flat vector."""
    params, start = [], 0
    for shape in MLP_SHAPES:  # views of the vector, in order
        size = math.prod(shape)
        params.append(flat[start:start + size].reshape(shape))
        start += size
    W1, b1, W2, b2 = params
    H = d2l.relu(d2l._dot(X.reshape(X.shape[0], -1), W1) + b1)
    return d2l._dot(H, W2) + b2


def held_bytes(d2l, replica):
    """Bytes of the arrays that one device keeps between steps."""
    return sum(d2l._nbytes(x) for x in replica.values())


def pipeline_params(d2l, width=512):
    """Two pipeline stages of an MLP, as lists of (weight, bias): stage 0
    784 -> width -> width, stage 1 width -> width -> 10."""
    def layer(n_in, n_out):
        return [_he(d2l, (n_in, n_out), n_in), d2l._zeros(n_out)]
    return [layer(784, width) + layer(width, width),
            layer(width, width) + layer(width, 10)]


def stage_forward(d2l, X, params, last=False):
    """One pipeline stage: its layers, each followed by a ReLU except the
    very last layer of the model."""
    X = X.reshape(X.shape[0], -1)
    for i in range(0, len(params), 2):
        X = d2l._dot(X, params[i]) + params[i + 1]
        if not (last and i == len(params) - 2):
            X = d2l.relu(X)
    return X


def model_functions(module_name):
    """`lenet_params`, `mlp_params`, `mlp`, `held_bytes`,
    `pipeline_params` and `stage_forward` bound to the backend module
    `module_name` (its models module)."""
    return [bind(fn, module_name) for fn in (
        lenet_params, mlp_params, mlp, held_bytes, pipeline_params,
        stage_forward)]
