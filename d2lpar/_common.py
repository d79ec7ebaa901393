"""Framework-free parts of d2lpar, written once for both backends.

Nothing here imports PyTorch or MXNet. The backends (``d2lpar.torch`` and
``d2lpar.mxnet``) add the framework glue: how to synchronise a device, how
to copy an array, how to turn a NumPy batch into a framework tensor.
"""
import dataclasses
import functools
import gzip
import hashlib
import math
import numbers
import os
import struct
import tempfile
import time
import urllib.request

import numpy as np

try:  # file locks: Linux and macOS
    import fcntl
except ImportError:  # Windows: downloads go without the lock
    fcntl = None

from d2lpar import cost as _cost
from d2lpar import fonts
from d2lpar.cost import (  # noqa: F401 (re-exported by both backends)
    LINKS, Link, allreduce_time, format_seconds, gpu_link, plot_cost_model)
from d2lpar.sharding import (  # noqa: F401 (shared by both backends)
    bubble_fraction, collective_seconds, gpipe_schedule, measured_bubble,
    plot_memory, shard_bounds, zero_memory)
from d2lpar.i18n import (  # noqa: F401 (source_code, use_language: shared)
    Message, N_, _, display_width, error_message, ngettext, number, pad,
    source_code, use_language)

# The names each backend re-exports as they are.
SHARED = ['Animator', 'DataError', 'TrainResult', 'data_dir', 'epoch_shards',
          'fashion_mnist_arrays', 'learning_rate', 'plot_allreduce',
          'plot_scaling', 'plot_timings', 'say_once', 'source_code',
          'use_language',
          # the cost model of an allreduce (d2lpar.cost) and the drift
          # between runs on 1 and 2 devices
          'LINKS', 'Link', 'allreduce_time', 'format_seconds', 'gpu_link',
          'plot_cost_model', 'plot_drift',
          # lesson 5 (d2lpar/sharding.py)
          'bubble_fraction', 'collective_seconds', 'gpipe_schedule',
          'measured_bubble', 'plot_memory', 'shard_bounds', 'zero_memory']
# The public names that d2lpar.torch and d2lpar.mxnet each define in their
# own framework (tests/test_api.py checks that both define every one)
BACKEND = [
    'Benchmark', 'DistributedResult', 'Timeline', 'Timer', 'allreduce',
    'check_finite', 'copy_bandwidth', 'cpu', 'direct_allreduce',
    'distributed_commands',
    'evaluate_accuracy', 'forward_backward', 'get_params', 'gpu', 'launch',
    'lenet', 'lenet_params', 'load_data_fashion_mnist', 'loss',
    'measure_allreduce', 'num_gpus', 'parameter_drift', 'plot_processes',
    'print_processes', 'products_that_fit', 'resnet18', 'ring_allreduce',
    'sgd', 'split_batch',
    'synchronize', 'train', 'train_batch', 'train_concise',
    'train_distributed', 'train_step_timeline', 'try_all_gpus',
    'try_devices', 'try_gpu',
    # lesson 5
    'adam', 'all_gather', 'gpipe_step', 'held_bytes', 'mlp', 'mlp_params',
    'pipeline_params', 'reduce_scatter', 'split_columns', 'split_rows',
    'stage_forward', 'tensor_parallel_mlp', 'zero_replicas', 'zero_step']

# --------------------------------------------------------------------------
# Messages that a lesson prints once per process
# --------------------------------------------------------------------------
_said = set()


def say_once(message):
    """Print `message` the first time it is asked for in this process."""
    if message not in _said:
        _said.add(message)
        print(message)


def fallback_notice(num_wanted, num_found, threads_each, stand_ins):
    """Say in plain words what `try_devices` fell back to: CPU stand-ins
    with `threads_each` CPU threads each, half of the CPU's."""
    found = (_('No GPU found') if num_found == 0 else
             _('Only {num_found} GPU(s) found').format(num_found=num_found))
    share = (_('two of them split the CPU in two') if num_wanted <= 2 else
             _('{n} of them share cores meant for two').format(n=num_wanted))
    return ngettext(
        '{found}, {n} device requested: using {n} CPU stand-in '
        '({stand_ins}), computing with {threads} CPU thread(s) of its own '
        '({share}).',
        '{found}, {n} devices requested: using {n} CPU stand-ins '
        '({stand_ins}), each computing with {threads} CPU thread(s) of its '
        'own ({share}).', num_wanted).format(
            found=found, n=num_wanted, stand_ins=stand_ins,
            threads=threads_each, share=share)


def products_that_fit_with(free_bytes, num_products, shape, devices):
    """`products_that_fit`, given ``free_bytes(device)``: the bytes free
    on `device` when it is a GPU, None for any other device."""
    devices = check_devices(devices)
    if not isinstance(num_products, int) or num_products < 1:
        raise ValueError(error_message(
            'num_products must be an int >= 1, got {num_products!r}.',
            num_products=num_products))
    each = 4 * int(np.prod(shape))  # one float32 result
    fit = num_products
    for device in devices:
        free = free_bytes(device)
        if free is None:  # not a GPU: the workload stays as it is
            continue
        # Leave a tenth of the free memory (at least 256 MiB) to the
        # framework's own workspaces, and room for the input matrix
        usable = free - max(free // 10, 256 << 20) - each
        n = usable // each
        if n < 1:
            raise ValueError(error_message(
                '{device!s} has {free:.2f} GB free: not enough for even one '
                'product of shape {shape!s} ({each:.0f} MB a result). Free '
                'GPU memory (restart the other notebooks that use it) or '
                'take smaller matrices.', device=device, free=free / 1e9,
                shape=tuple(shape), each=each / 1e6))
        fit = min(fit, int(n))
    return fit


# --------------------------------------------------------------------------
# Checks with messages that say what to do
# --------------------------------------------------------------------------
def check_devices(devices):
    """Return `devices` as a non-empty list, or raise a clear error."""
    if devices is None or isinstance(devices, (str, bytes)):
        raise TypeError(error_message(
            'devices must be a list of devices, got {devices!r}; for '
            'example d2l.try_all_gpus().', devices=devices))
    devices = list(devices)
    if not devices:
        raise ValueError(error_message(
            'The device list is empty: pass at least one device, e.g. '
            'd2l.try_all_gpus(), which falls back to the CPU when there is '
            'no GPU.'))
    return devices


def check_split(num_X, num_y, devices):
    """Check that a batch of `num_X` examples can be split over devices."""
    devices = check_devices(devices)
    if num_X != num_y:
        raise ValueError(error_message(
            'X has {num_X} examples but y has {num_y}: pass the features '
            'and labels of the same minibatch.', num_X=num_X, num_y=num_y))
    if num_X < len(devices):
        raise ValueError(error_message(
            'Cannot split {num_X} examples over {k} devices: each device '
            'needs at least one example. Use a larger batch or fewer '
            'devices.', num_X=num_X, k=len(devices)))
    return devices


def check_replicas(device_params, devices):
    """Check that there is one copy of the parameters per device."""
    devices = check_devices(devices)
    if len(device_params) != len(devices):
        raise ValueError(error_message(
            'Got {copies} copies of the parameters for {k} devices: make '
            'one per device with get_params(params, device).',
            copies=len(device_params), k=len(devices)))
    return devices


def check_allreduce(data, memory_of=id, device_of=None):
    """Check that `data` is a list of same-shape, same-dtype, distinct
    arrays (one per device) that can be summed in place.

    Arrays on different devices cannot share memory, so `memory_of(x)`
    (where the data of `x` lives) is asked only of arrays that share a
    device with another one (`device_of(x)`): in training, one gradient
    per device, it is never asked, and nothing has to wait for the
    gradients to be computed."""
    if not isinstance(data, (list, tuple)):
        raise TypeError(error_message(
            'allreduce expects a list with one array per device, got '
            '{type}.', type=type(data).__name__))
    if not data:
        raise ValueError(error_message(
            'allreduce got an empty list: pass one array per device.'))
    for i, x in enumerate(data):
        if not hasattr(x, 'shape') or not hasattr(x, 'dtype'):
            raise TypeError(error_message(
                'allreduce sums arrays in place, one per device, but '
                'data[{i}] is a {type} ({x!r}): pass tensors (PyTorch) or '
                'ndarrays (MXNet).', i=i, type=type(x).__name__, x=x))
    shapes = [tuple(x.shape) for x in data]
    if len(set(shapes)) > 1:
        raise ValueError(error_message(
            'allreduce needs arrays of one shape to sum them elementwise, '
            'got shapes {shapes}. Reduce the same parameter (or gradient) '
            'from every device.', shapes=shapes))
    dtypes = [str(x.dtype) for x in data]
    if len(set(dtypes)) > 1:
        raise TypeError(error_message(
            'allreduce needs arrays of one dtype, got {dtypes}. Cast them to '
            'the same dtype first.', dtypes=dtypes))
    on_device = {}
    for i, x in enumerate(data):
        device = None if device_of is None else str(device_of(x))
        on_device.setdefault(device, []).append(i)
    for indices in on_device.values():
        seen = {}
        for i in indices if len(indices) > 1 else ():
            key = memory_of(data[i])
            if key in seen:
                raise ValueError(error_message(
                    'data[{j}] and data[{i}] share memory, so summing in '
                    'place would count it twice. Give each device its own '
                    'copy (get_params makes one).', j=seen[key], i=i))
            seen[key] = i


# --------------------------------------------------------------------------
# Ring allreduce, written once against three small framework hooks
# --------------------------------------------------------------------------
def chunk_bounds(n, k):
    """Boundaries that cut `n` elements into `k` nearly equal chunks."""
    return [n * j // k for j in range(k + 1)]


def ring_allreduce_with(data, flat, copy_like, unflat=None,
                        copy_into=None):
    """Sum the arrays of `data` in place with a ring allreduce.

    `flat(x)` returns `x` as a 1-D array; `copy_like(src, dst)` returns
    `src` on the device of `dst`; `unflat(flat_x, x)`, when `flat` makes a
    copy instead of a view, writes the result back into `x`; and
    `copy_into(src, dst)`, when given, copies a chunk straight into place
    (saving one temporary copy per step of the all-gather).

    Each of the k arrays is cut into k chunks. In k-1 reduce-scatter steps
    device i passes one chunk to its neighbour i+1, which adds it to its
    own; afterwards device i holds the full sum of chunk i+1. In k-1
    all-gather steps the finished chunks travel once more round the ring.
    Every link carries 2(k-1)/k of the data, whatever k is.
    """
    k = len(data)
    if k == 1:
        return
    flats = [flat(x) for x in data]
    b = chunk_bounds(flats[0].shape[0], k)
    for s in range(k - 1):  # reduce-scatter
        for i in range(k):
            c, j = (i - s) % k, (i + 1) % k
            if b[c] < b[c + 1]:
                dst = flats[j][b[c]:b[c + 1]]  # a view: added in place
                dst += copy_like(flats[i][b[c]:b[c + 1]], flats[j])
    for s in range(k - 1):  # all-gather
        for i in range(k):
            c, j = (i + 1 - s) % k, (i + 1) % k
            if b[c] < b[c + 1] and copy_into is not None:
                copy_into(flats[i][b[c]:b[c + 1]], flats[j][b[c]:b[c + 1]])
            elif b[c] < b[c + 1]:
                flats[j][b[c]:b[c + 1]] = copy_like(
                    flats[i][b[c]:b[c + 1]], flats[j])
    if unflat is not None:
        for f, x in zip(flats, data):
            unflat(f, x)


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------
class Benchmark:
    """Time a block of code and print ``<description>: <t> sec``.

    Unlike ``d2l.Benchmark``, it waits for the `devices` it is given to
    finish their queued work, on entry and before stopping the clock. GPUs
    run asynchronously: without that wait it would time how long Python
    took to *queue* the work. With ``devices=None`` nothing is waited for.

    Every measurement is kept in ``Benchmark.records`` as
    ``(description, seconds)``, so a lesson can tabulate or plot it.
    """
    records = []

    def __init__(self, description='Done', devices=None):
        # The default description is a word of the lesson's language
        self.description = _(description) if description == 'Done' \
            else description
        self.devices = None if devices is None else check_devices(devices)
        self.seconds = None

    @staticmethod
    def _synchronize(devices):
        raise NotImplementedError(error_message(
            'use the Benchmark of d2lpar.torch or d2lpar.mxnet to '
            'synchronise devices'))

    def __enter__(self):
        if self.devices:
            self._synchronize(self.devices)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc_info):
        if self.devices:
            self._synchronize(self.devices)
        self.seconds = time.perf_counter() - self._start
        if exc_info[0] is None:
            Benchmark.records.append((self.description, self.seconds))
            print(_('{description}: {seconds:.4f} sec').format(
                description=self.description, seconds=self.seconds))

    @classmethod
    def last(cls, description):
        """The latest time measured under `description`, in seconds."""
        for name, seconds in reversed(cls.records):
            if name == description:
                return seconds
        raise KeyError(error_message(
            'Nothing was measured as {description!r} yet: run the cell '
            'that times it first.', description=description))


def plot_timings(descriptions, sum_of=(), title=None, ax=None):
    """Bar chart of the latest time of each description (in seconds).

    With ``sum_of=(a, b)`` a hatched bar shows ``a + b``, the time the two
    would take one after the other, next to the measured ones. Returns
    the dict that was drawn, {label: seconds}.
    """
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    times = {d: Benchmark.last(d) for d in descriptions}
    if sum_of:
        times[' + '.join(sum_of)] = sum(Benchmark.last(d) for d in sum_of)
    if ax is None:
        ax = plt.subplots(figsize=(5.5, 0.45 * len(times) + 0.8))[1]
    labels = list(times)[::-1]
    bars = ax.barh(labels, [times[n] for n in labels], color='tab:blue')
    if sum_of:
        bars[0].set_color('lightgray')
        bars[0].set_hatch('//')
    for bar, name in zip(bars, labels):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                ' ' + number(times[name], '.3f'),
                va='center', fontsize=8)
    ax.set_xlabel(_('seconds'))
    ax.set_xlim(0, 1.2 * max(times.values()))
    if title:
        ax.set_title(title)
    plt.tight_layout()
    plt.show()
    return times


class Animator:
    """Plot data in animation, like ``d2l.Animator``, with one difference:
    d2l's version clears the whole output of the cell at every update,
    wiping out anything the cell printed before (such as which data set is
    in use); this one updates its own figure in place (an IPython display
    handle) and leaves the rest of the output alone."""

    def __init__(self, xlabel=None, ylabel=None, legend=None, xlim=None,
                 ylim=None, xscale='linear', yscale='linear',
                 fmts=('-', 'm--', 'g-.', 'r:'), figsize=(3.5, 2.5)):
        import matplotlib.pyplot as plt
        fonts.use_cjk_font()  # Chinese text, no missing glyph
        self.fig, self.ax = plt.subplots(figsize=figsize, layout='tight')
        plt.close(self.fig)  # shown through the display handle only
        self.labels = (xlabel, ylabel, legend or [], xlim, ylim, xscale,
                       yscale)
        self.X, self.Y, self.fmts, self.handle = None, None, fmts, None

    def add(self, x, y):
        if not hasattr(y, '__len__'):
            y = [y]
        n = len(y)
        if not hasattr(x, '__len__'):
            x = [x] * n
        if not self.X:
            self.X = [[] for _ in range(n)]
        if not self.Y:
            self.Y = [[] for _ in range(n)]
        for i, (a, b) in enumerate(zip(x, y)):
            if a is not None and b is not None:
                self.X[i].append(a)
                self.Y[i].append(b)
        ax = self.ax
        ax.cla()
        for xs, ys, fmt in zip(self.X, self.Y, self.fmts):
            ax.plot(xs, ys, fmt)
        xlabel, ylabel, legend, xlim, ylim, xscale, yscale = self.labels
        # Labels that d2lpar's catalog knows ('epoch', 'test acc', ...)
        # appear in the lesson's language
        ax.set_xlabel(None if xlabel is None else _(xlabel))
        ax.set_ylabel(None if ylabel is None else _(ylabel))
        ax.set_xscale(xscale)
        ax.set_yscale(yscale)
        ax.set_xlim(xlim)
        ax.set_ylim(ylim)
        if legend:
            ax.legend([_(label) for label in legend])
        ax.grid()
        from IPython import display
        if self.handle is None:
            self.handle = display.display(self.fig, display_id=True)
        else:
            self.handle.update(self.fig)


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: enough to print, tabulate or plot a run."""
    test_acc: float
    sec_per_epoch: float
    devices: list
    num_epochs: int
    num_examples: int
    test_accs: list

    @property
    def examples_per_sec(self):
        return self.num_examples / self.sec_per_epoch

    def __str__(self):
        return _('test acc: {test_acc:.2f}, {sec_per_epoch:.1f} sec/epoch '
                 'on {devices}').format(test_acc=self.test_acc,
                                        sec_per_epoch=self.sec_per_epoch,
                                        devices=self.devices)


def parameter_drift_with(load, try_devices, get_params, train_batch,
                         max_abs_diff, params, batch_size, lr, num_steps,
                         num_train, num_test):
    """What both backends' `parameter_drift` share: train a copy of
    `params` on one device and another on two, step by step on the same
    minibatches, and return max_abs_diff of their parameters after each
    step."""
    if (isinstance(num_steps, bool) or not isinstance(num_steps, int)
            or num_steps < 1):
        raise ValueError(error_message(
            'num_steps must be an int >= 1, got {num_steps!r}.',
            num_steps=num_steps))
    check_lr(lr)
    # The same loader as `train`: the same minibatches in the same order
    train_iter = load(batch_size, num_train, num_test)[0]
    runs = []
    for k in (1, 2):
        devices = try_devices(k)
        runs.append((devices, [get_params(params, d) for d in devices]))
    drift = []
    while len(drift) < num_steps:  # as many epochs as it takes
        for X, y in train_iter:
            for devices, device_params in runs:
                train_batch(X, y, device_params, devices, lr)
            one, two = runs[0][1][0], runs[1][1][0]  # first device's copy
            drift.append(max(max_abs_diff(a, b) for a, b in zip(one, two)))
            if len(drift) == num_steps:
                break
    return drift


# --------------------------------------------------------------------------
# Concise training: what both frameworks' `train_concise` share
# --------------------------------------------------------------------------
def check_lr(lr):
    """`lr`, or a ValueError when it is not a finite number above 0."""
    if (isinstance(lr, bool) or not isinstance(lr, numbers.Real)
            or not math.isfinite(lr) or lr <= 0):
        raise ValueError(error_message(
            'The learning rate must be a finite number above 0, got '
            '{lr!r}: try 0.1.', lr=lr))
    return lr


def diverged(epoch, lr):
    """The error for parameters that became NaN or infinite in `epoch`."""
    check_lr(lr)
    return FloatingPointError(error_message(
        'Training diverged in epoch {epoch}: the parameters hold NaN or '
        'infinite values. The learning rate {lr} is too large for this '
        'model and data: try a smaller one, e.g. {smaller}.',
        epoch=epoch + 1, lr=str(lr), smaller=f'{lr / 10:g}'))


def check_concise(batch_size, devices, num_train, num_epochs, warmup_epochs,
                  lr=0.1):
    """The devices as a list, or a ValueError that says what to change."""
    devices = check_devices(devices)
    check_lr(lr)
    k = len(devices)
    if not isinstance(batch_size, numbers.Integral):
        raise ValueError(error_message(
            'batch_size must be an integer, got {batch_size!r}.',
            batch_size=batch_size))
    if batch_size < k or batch_size % k:
        raise ValueError(error_message(
            'batch_size {batch_size!r} cannot be cut into {k} equal shards, '
            'one per device: pass a multiple of {k} (e.g. {example}).',
            batch_size=batch_size, k=k, example=k * 64))
    if num_train is not None and num_train < batch_size:
        raise ValueError(error_message(
            'num_train={num_train!s} examples make no batch of '
            '{batch_size}: use more examples or a smaller batch.',
            num_train=num_train, batch_size=batch_size))
    if not isinstance(num_epochs, numbers.Integral) or num_epochs < 1:
        raise ValueError(error_message(
            'num_epochs must be an integer >= 1, got {num_epochs!r}.',
            num_epochs=num_epochs))
    if not 0 <= warmup_epochs <= num_epochs:
        raise ValueError(error_message(
            'warmup_epochs must lie between 0 and num_epochs '
            '({num_epochs}), got {warmup_epochs!r}.',
            num_epochs=num_epochs, warmup_epochs=warmup_epochs))
    return devices


def run_concise(devices, batch_size, num_epochs, num_train, num_test, plot,
                train):
    """What both backends' `train_concise` share: call ``train(report)``,
    which trains and calls ``report(epoch, test accuracy, seconds)`` after
    each epoch, plot the accuracy as it comes, then print and return the
    `TrainResult`."""
    # Load the data here first: its notice comes before the training, and
    # the processes of a multi-device run find it in the cache
    n = len(fashion_mnist_arrays(num_train, num_test)[1])
    animator = Animator(N_('epoch'), N_('test acc'), xlim=[1, num_epochs],
                        ylim=[0, 1]) if plot else None
    accs, seconds = [], []

    def report(epoch, acc, sec):
        accs.append(acc)
        seconds.append(sec)
        if animator:
            animator.add(epoch + 1, (acc,))

    train(report)
    result = TrainResult(accs[-1], sum(seconds) / len(seconds),
                         [str(d) for d in devices], num_epochs,
                         n // batch_size * batch_size, accs)
    print(result)
    return result


def learning_rate(step, lr, warmup_steps, total_steps):
    """The learning rate of step `step` (counted from 0) out of
    `total_steps`: a linear warm-up from ``lr / warmup_steps`` to `lr`
    over the first `warmup_steps` steps, then a cosine decay to 0."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return lr * 0.5 * (1 + math.cos(math.pi * progress))


def epoch_shards(num_examples, batch_size, rank=0, world_size=1, seed=0):
    """The examples that process `rank` of `world_size` takes in each step
    of one epoch. Every process draws the same shuffled order (from
    `seed`), cuts it into global batches of `batch_size` (dropping a last,
    partial batch) and takes its own contiguous shard of each."""
    b = batch_size // world_size
    order = np.random.default_rng(seed).permutation(num_examples)
    for i in range(num_examples // batch_size):
        start = i * batch_size + rank * b
        yield order[start:start + b]


def choose_gpu(num_gpus, local_rank, local_processes):
    """Where process `local_rank` of the `local_processes` that train on
    this machine runs, as ``(gpu, notice)``: `gpu` is the index of its GPU,
    or None for the CPU; `notice` says why the processes use the CPU when
    there are GPUs (else it is None).

    Each process needs a GPU of its own (PyTorch's NCCL backend refuses two
    processes on one GPU), and all processes use the same kind of device
    (one backend for all). So with fewer GPUs than processes, every process
    trains on the CPU; with enough, process i takes GPU i."""
    if not 0 <= local_rank < local_processes:
        raise ValueError(error_message(
            'local rank {local_rank} is not one of the {n} processes of '
            'this machine.', local_rank=local_rank, n=local_processes))
    if num_gpus >= local_processes:
        return local_rank, None
    if num_gpus == 0:
        return None, None  # the CPU, as expected: nothing to explain
    return None, _(
        '{n} processes but only {num_gpus} GPU(s) on this machine: all '
        'processes train on the CPU, since each one needs a GPU of its own '
        '(with PyTorch, NCCL cannot share one between processes). Start at '
        'most {num_gpus} process(es) to train on the GPU(s).').format(
            n=local_processes, num_gpus=num_gpus)


# --------------------------------------------------------------------------
# Fashion-MNIST: real files when they can be had, a stand-in otherwise
# --------------------------------------------------------------------------
class DataError(ValueError):
    """A data file is missing, corrupt or truncated."""


FASHION_MNIST_URL = ('http://fashion-mnist.s3-website.eu-central-1'
                     '.amazonaws.com/')
FASHION_MNIST_FILES = {
    'train': (('train-images-idx3-ubyte.gz',
               '8d4fb7e6c68d591d4c3dfef9ec88bf0d'),
              ('train-labels-idx1-ubyte.gz',
               '25c81989df183df01b3e8a0aad5dffbe')),
    'test': (('t10k-images-idx3-ubyte.gz',
              'bef4ecab320f06d8554ea6380940ec79'),
             ('t10k-labels-idx1-ubyte.gz',
              'bb300cfdad3c16e7a12a480ee83cd310')),
}
DOWNLOAD_TIMEOUT = 5  # seconds; a closed network must not stall a lesson
_offline = False  # set after the first failed download in this process


def data_dir():
    """Where data sets are cached.

    ``$D2LPAR_DATA`` if set; else ``../data`` as in the d2l book, when it
    can be written; else a per-user cache (``$XDG_CACHE_HOME/d2lpar`` or
    ``~/.cache/d2lpar``), e.g. for a read-only checkout on a shared server.
    """
    chosen = os.environ.get('D2LPAR_DATA')
    if chosen:
        try:
            os.makedirs(chosen, exist_ok=True)
        except OSError as e:
            raise DataError(error_message(
                'D2LPAR_DATA={chosen} cannot be created ({error}): point it '
                'to a folder you can write to.', chosen=chosen,
                error=e)) from e
        return os.path.abspath(chosen)
    candidates = [None, os.path.join('..', 'data'),
                  os.path.join(os.environ.get('XDG_CACHE_HOME')
                               or os.path.expanduser('~/.cache'), 'd2lpar')]
    for d in candidates:
        if not d:
            continue
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return os.path.abspath(d)
    raise DataError(error_message(
        'No writable data directory among {candidates}: set D2LPAR_DATA to '
        'a folder you can write to.', candidates=candidates[1:]))


def training_arguments(description, who):
    """The command-line options that both training scripts share (`who`
    names the processes: 'processes' or 'workers'); each script adds its
    own and calls ``parse_args``."""
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument('--out', required=True, help=_('folder for the results'))
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=256,
                   help=_('global batch, over all processes')
                   if who == 'processes' else
                   _('global batch, over all workers'))
    p.add_argument('--lr', type=float, default=0.2,
                   help=_('learning rate of the first step; it decays to 0 '
                          'by the last step (cosine)'))
    p.add_argument('--num-train', type=int, default=None)
    p.add_argument('--num-test', type=int, default=None)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--cpu', action='store_true',
                   help=_('train on the CPU even when there are GPUs'))
    p.add_argument('--crash-at-step', type=int, default=None,
                   help=_('to test failure handling: --crash-rank fails '
                          'here'))
    p.add_argument('--crash-rank', type=int, default=0)
    p.add_argument('--leave-a-child', action='store_true',
                   help=_('to test the cleanup: every process starts a '
                          'process that outlives it'))
    return p


def shards_of_epoch(args, num_examples, rank, world, epoch, step):
    """For the training scripts: this rank's shard of every global batch of
    `epoch`, as ``(step, indices)`` with the step counted on from `step`.
    With ``--crash-at-step`` the process ``--crash-rank`` fails at that
    step (how the tests check that a crash ends the run cleanly). With
    ``--leave-a-child`` every process first starts a process that outlives
    it (how the tests check that the launcher stops those too)."""
    if args.leave_a_child and step == 0:
        leave_a_child(args.out, rank)
    for idx in epoch_shards(num_examples, args.batch_size, rank, world,
                            seed=(args.seed, epoch)):
        step += 1
        if step == args.crash_at_step and rank == args.crash_rank:
            raise RuntimeError(error_message(
                'rank {rank} crashes at step {step}, as asked by '
                '--crash-at-step', rank=rank, step=step))
        if step == getattr(args, 'fail_at_step', None) and rank == world - 1:
            fail_once(args.out, rank, step)
        yield step, idx


def checkpoint_arguments(p):
    """The options of checkpoints and restarts, for both scripts."""
    p.add_argument('--checkpoint', metavar='DIR', default=None,
                   help=_('save a checkpoint there after every epoch, and '
                          'resume from it'))
    p.add_argument('--fail-at-step', type=int, default=None,
                   help=_('to test restarts: the last process kills itself '
                          'at this step, the first time only'))


def fail_once(out, rank, step):
    """Kill this process with SIGKILL, as a crashed machine would end it,
    unless it did so before: the file OUT/failed-at-step-N remembers, so
    that the restarted run goes past step N."""
    import signal
    marker = os.path.join(out, f'failed-at-step-{step}')
    if os.path.exists(marker):
        return
    os.makedirs(out, exist_ok=True)
    with open(marker, 'w') as f:
        f.write(f'{os.getpid()}\n')
    print(_('rank {rank} kills itself at step {step} (--fail-at-step)')
          .format(rank=rank, step=step), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def leave_a_child(out, rank):
    """Start a process that sleeps for 10 minutes in a session of its own,
    where no signal to our process group reaches it, and say its pid on
    stdout. Its command line names `out`, so that a test can find it."""
    import subprocess
    import sys
    child = subprocess.Popen(
        [sys.executable, '-c', 'import time; time.sleep(600)', out],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    # Not translated: the tests read this line
    print(f'd2lpar: rank {rank} left process {child.pid} behind', flush=True)


def write_json(path, data):
    """Write `data` as JSON atomically: a reader never sees half a file."""
    import json
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def md5sum(path):
    h = hashlib.md5()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def download(url, path, md5, timeout=DOWNLOAD_TIMEOUT):
    """Fetch `url` to `path` atomically and check its MD5.

    The bytes go to a temporary file in the same folder, which is renamed
    over `path` only once its checksum is right, so a killed download
    never leaves a half-written file under the real name. A lock file
    makes concurrent processes wait for each other instead of fetching
    twice. Raises OSError (network) or DataError (bad checksum).
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, '.lock'), 'w') as lock:
        if fcntl is not None:  # released when the file is closed
            fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path) and md5sum(path) == md5:
            return path  # another process finished it while we waited
        fd, tmp = tempfile.mkstemp(dir=folder, prefix='.part-')
        try:
            with os.fdopen(fd, 'wb') as out, \
                    urllib.request.urlopen(url, timeout=timeout) as src:
                for block in iter(lambda: src.read(1 << 20), b''):
                    out.write(block)
            got = md5sum(tmp)
            if got != md5:
                raise DataError(error_message(
                    '{url} arrived with MD5 {got}, expected {md5}: the '
                    'download is damaged or the mirror holds another file.',
                    url=url, got=got, md5=md5))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path


def read_idx(path):
    """Read a gzipped IDX file (the MNIST format) into a NumPy array."""
    try:
        with gzip.open(path, 'rb') as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataError(error_message(
            '{path} is not a readable gzip file ({error}). Delete it and '
            'run again to fetch a fresh copy.', path=path, error=e)) from e
    if len(raw) < 4 or raw[:2] != b'\x00\x00' or raw[2] != 8:
        raise DataError(error_message(
            '{path} is not an IDX file of bytes (bad magic number). Delete '
            'it and run again.', path=path))
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(error_message(
            '{path} is truncated (header). Delete it and run again.',
            path=path))
    shape = struct.unpack(f'>{ndim}I', raw[4:header])
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise DataError(error_message(
            '{path} holds {got} bytes of data, its header promises {size}: '
            'the file is truncated or corrupt. Delete it and run again.',
            path=path, got=len(raw) - header, size=size))
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def fetch_fashion_mnist(split, root=None):
    """Return (images, labels) of the real Fashion-MNIST `split`, from the
    cache or the network; None when offline and the files are missing, or
    when a download arrives damaged (then it says why, once).

    The files come from ``$D2LPAR_FASHION_MNIST_URL`` (a mirror's base URL
    ending in '/', e.g. a local server) if set, else FASHION_MNIST_URL;
    either way they must match the MD5s of FASHION_MNIST_FILES."""
    global _offline
    folder = os.path.join(root or data_dir(), 'FashionMNIST', 'raw')
    base = os.environ.get('D2LPAR_FASHION_MNIST_URL', FASHION_MNIST_URL)
    paths = []
    for name, md5 in FASHION_MNIST_FILES[split]:
        path = os.path.join(folder, name)
        paths.append(path)
        cached = os.path.exists(path)
        if cached and md5sum(path) == md5:
            continue
        if _offline or os.environ.get('D2LPAR_OFFLINE'):
            error = Message('offline')
        else:
            try:
                download(base + name, path, md5)
                continue
            except (OSError, DataError) as e:
                _offline = isinstance(e, OSError)
                error = e
                if isinstance(e, DataError) and not cached:
                    say_once(str(e))  # not "offline?": a damaged file
        if cached:  # (only a file that is there can fail its checksum)
            raise DataError(error_message(
                '{path} is corrupt or truncated (checksum mismatch) and '
                'could not be fetched again ({error}). Delete it, or copy a '
                'good one there, and run again.', path=path, error=error))
        return None
    images, labels = (read_idx(p) for p in paths)
    if len(images) != len(labels):
        raise DataError(error_message(
            '{images_path} has {images} images but {labels_path} has '
            '{labels} labels.', images_path=paths[0], images=len(images),
            labels_path=paths[1], labels=len(labels)))
    return images, labels.astype(np.int64)


def _templates():
    """Ten fixed 28x28 class patterns for the stand-in data set."""
    rng = np.random.default_rng(2024)
    yy, xx = np.mgrid[0:28, 0:28]
    out = np.zeros((10, 28, 28))
    for c in range(10):
        for _ in range(3):
            cy, cx = rng.uniform(6, 22, 2)
            sy, sx = rng.uniform(2, 7, 2)
            out[c] += np.exp(-((yy - cy) / sy) ** 2 - ((xx - cx) / sx) ** 2)
        out[c] /= out[c].max()
    return out


def stand_in_fashion_mnist(n, seed):
    """A deterministic 28x28, ten-class stand-in for Fashion-MNIST.

    Each class is a fixed pattern of blobs; an example is its class
    pattern shifted by up to two pixels, dimmed, and covered in noise, so
    a small CNN learns it well above chance but not perfectly.
    """
    rng = np.random.default_rng(seed)
    padded = np.pad(_templates(), ((0, 0), (2, 2), (2, 2)))
    y = rng.integers(0, 10, n)
    dy, dx = rng.integers(0, 5, (2, n))
    rows = dy[:, None] + np.arange(28)[None, :]
    cols = dx[:, None] + np.arange(28)[None, :]
    X = padded[y[:, None, None], rows[:, :, None], cols[:, None, :]]
    X = X * rng.uniform(0.5, 1.0, (n, 1, 1))
    X = X + rng.normal(0, 0.35, X.shape)
    X = (np.clip(X, 0, 1) * 255).astype(np.uint8)
    return X, y.astype(np.int64)


class DataIter:
    """Minibatches of in-memory arrays, converted by `convert`.

    No worker processes: the whole set sits in memory as float32, and a
    batch is one NumPy gather, which is fast on a 2-core machine.
    """

    def __init__(self, X, y, batch_size, shuffle, convert, drop_last=False,
                 seed=0):
        if batch_size < 1:
            raise ValueError(error_message(
                'batch_size must be at least 1, got {batch_size!s}.',
                batch_size=batch_size))
        self.X, self.y, self.batch_size = X, y, batch_size
        self.shuffle, self.convert = shuffle, convert
        self.drop_last = drop_last
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        n, b = len(self.y), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self):
        n = len(self.y)
        if self.drop_last and n < self.batch_size:
            raise ValueError(error_message(
                '{n} training examples do not fill one minibatch of '
                '{batch_size}, so training would take no step: keep at '
                'least {batch_size} examples (num_train) or use a smaller '
                'batch_size.', n=n, batch_size=self.batch_size))
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            if self.shuffle:
                idx = np.sort(idx)  # sequential gathers are faster
            yield self.convert(self.X[idx], self.y[idx])


@functools.lru_cache(maxsize=4)
def fashion_mnist_arrays(num_train=None, num_test=None):
    """(X_train, y_train, X_test, y_test, source): float32 images of shape
    (n, 1, 28, 28) in [0, 1], int64 labels, and where they came from."""
    train = fetch_fashion_mnist('train')
    test = fetch_fashion_mnist('test') if train is not None else None
    if train is None or test is None:
        source = N_('the stand-in data set')
        say_once(_('Fashion-MNIST is not in the cache and cannot be '
                   'downloaded (offline?): using a synthetic stand-in with '
                   '10 classes of 28x28 images, made by d2lpar. Accuracies '
                   "differ from the book's."))
        n_tr, n_te = num_train or 60000, num_test or 10000
        train = stand_in_fashion_mnist(n_tr, seed=0)
        test = stand_in_fashion_mnist(n_te, seed=1)
    else:
        source = 'Fashion-MNIST'
    arrays = []
    for (X, y), n in ((train, num_train), (test, num_test)):
        n = len(y) if n is None else min(n, len(y))
        arrays.append((X[:n, None].astype(np.float32) / 255, y[:n]))
    (X_tr, y_tr), (X_te, y_te) = arrays
    say_once(_('Data: {source}, {train} training and {test} test '
               'images.').format(source=_(source), train=len(y_tr),
                                 test=len(y_te)))
    return X_tr, y_tr, X_te, y_te, source


def load_data_fashion_mnist_with(convert, batch_size, num_train=None,
                                 num_test=None):
    X_tr, y_tr, X_te, y_te, _ = fashion_mnist_arrays(num_train, num_test)
    return (DataIter(X_tr, y_tr, batch_size, True, convert, drop_last=True),
            DataIter(X_te, y_te, batch_size, False, convert))


# --------------------------------------------------------------------------
# Timelines: which operation ran where, and when
# --------------------------------------------------------------------------
@dataclasses.dataclass
class Event:
    """One operation on a timeline; times in seconds from its start."""
    name: str
    row: str
    start: float
    end: float
    kind: str = 'compute'  # or 'copy'


KIND_COLORS = {'compute': 'tab:blue', 'copy': 'tab:orange',
               'other': 'tab:gray'}
# What the legends call each kind (translated when drawn)
KIND_LABELS = {'compute': N_('compute'), 'copy': N_('copy'),
               'other': N_('other'), 'communication': N_('communication')}


def row_label(row):
    """The name of a timeline row ('main thread', 'CPU thread 1', 'cpu:0
    copy', 'cuda:0', ...) in the lesson's language."""
    if row.startswith('CPU thread ') and row[11:].isdigit():
        return _('CPU thread {n}').format(n=int(row[11:]))
    if row.endswith(' copy'):
        return _('{device} copy').format(device=row[:-5])
    return _(row)  # 'main thread'; a device's name stays as it is


class Timeline:
    """Record what runs where inside a ``with`` block, then `plot` it.

    The backends say how events are recorded (PyTorch: its profiler;
    MXNet: its profiler when the build has one, else a watcher thread per
    device). `watch(arrays, label, kind)` names results for backends that
    need it and returns them unchanged.
    """
    source = N_('nothing')  # what recorded the events, for the title

    def __init__(self):
        self.events = []

    def watch(self, arrays, label, kind='compute'):
        return arrays

    def rows(self):
        return sorted({e.row for e in self.events})

    def plot(self, title=None, ax=None):
        """A Gantt chart: one row per device or thread (a GPU has one row
        for all of its streams); compute and copies in different colours;
        time in milliseconds. A row with work of several kinds is cut
        into lanes, one per kind, so that a copy that overlaps a
        computation of the same device (a GPU's side stream) is drawn
        beside it rather than over it."""
        import matplotlib.pyplot as plt
        fonts.use_cjk_font()  # Chinese text, no missing glyph
        from matplotlib.patches import Patch
        rows = self.rows()
        if ax is None:
            ax = plt.subplots(figsize=(6.5, 0.5 * len(rows) + 1.1))[1]
        lanes = {}  # (row, kind) -> (bottom, height) of its bars
        for y, row in enumerate(rows):
            kinds = [k for k in KIND_COLORS if any(
                e.row == row and e.kind == k for e in self.events)]
            for i, kind in enumerate(kinds):
                height = 0.7 / len(kinds)
                lanes[row, kind] = (y - 0.35 + i * height, height)
                spans = [(1e3 * e.start, max(1e3 * (e.end - e.start), 1e-3))
                         for e in self.events if e.row == row
                         and e.kind == kind]
                ax.broken_barh(spans, lanes[row, kind], color=KIND_COLORS[
                    kind], edgecolor='white', linewidth=0.3)
        total = max((e.end for e in self.events), default=1)
        for e in self.events:  # name the bars that are wide enough
            if e.end - e.start > 0.08 * total:
                bottom, height = lanes[e.row, e.kind]
                ax.text(1e3 * (e.start + e.end) / 2, bottom + height / 2,
                        e.name, ha='center', va='center', fontsize=7,
                        color='white', clip_on=True)
        ax.set_yticks(range(len(rows)), [row_label(r) for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel(_('milliseconds'))
        kinds = sorted({e.kind for e in self.events})
        ax.legend(handles=[Patch(color=KIND_COLORS[k],
                                 label=_(KIND_LABELS.get(k, k)))
                           for k in kinds], fontsize=8, frameon=False,
                  loc='lower left', bbox_to_anchor=(1.0, 0.0))
        ax.set_title(title or _('recorded with {source}').format(
            source=_(self.source)), fontsize=10)
        plt.tight_layout()
        plt.show()
        return ax

    def save(self, path):
        """Write the events as a Chrome trace (JSON) that Perfetto
        (ui.perfetto.dev) or chrome://tracing can open."""
        import json
        rows = self.rows()
        trace = [{'name': e.name, 'cat': e.kind, 'ph': 'X', 'pid': 0,
                  'tid': rows.index(e.row), 'ts': 1e6 * e.start,
                  'dur': 1e6 * (e.end - e.start)} for e in self.events]
        trace += [{'name': 'thread_name', 'ph': 'M', 'pid': 0, 'tid': i,
                   'args': {'name': row}} for i, row in enumerate(rows)]
        with open(path, 'w') as f:
            json.dump({'traceEvents': trace}, f)
        return path


def events_from_chrome_trace(trace, classify):
    """Events of a Chrome trace dict (complete 'X' events or 'B'/'E'
    pairs), rows named by process and thread, times from the first one."""
    names = {(e.get('pid'), e.get('tid')): e['args']['name']
             for e in trace.get('traceEvents', [])
             if e.get('ph') == 'M' and e.get('name') == 'thread_name'}
    spans, open_ = [], {}
    for e in trace.get('traceEvents', []):
        key = (e.get('pid'), e.get('tid'))
        if e.get('ph') == 'X':
            spans.append((e['name'], key, e['ts'], e['ts'] + e['dur']))
        elif e.get('ph') == 'B':
            open_.setdefault((key, e['name']), []).append(e['ts'])
        elif e.get('ph') == 'E' and open_.get((key, e.get('name'))):
            start = open_[(key, e['name'])].pop()
            spans.append((e['name'], key, start, e['ts']))
    if not spans:
        return []
    t0 = min(s[2] for s in spans)
    return [Event(name, names.get(key, f'{key[0]}/{key[1]}'),
                  (start - t0) / 1e6, (end - t0) / 1e6, classify(name))
            for name, key, start, end in sorted(spans, key=lambda s: s[2])]


class quiet_stderr:
    """Silence what C++ libraries print on file descriptor 2 (e.g. the
    profiler's start/stop log lines) for the duration of a block."""

    def __enter__(self):
        import sys
        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc_info):
        os.dup2(self._saved, 2)
        os.close(self._saved)


# --------------------------------------------------------------------------
# Scaling and allreduce charts
# --------------------------------------------------------------------------
def plot_scaling(results, title=None):
    """Seconds per epoch and test accuracy against the number of devices,
    from a list of `TrainResult`, with the ideal linear speedup drawn from
    the one-device run."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    results = sorted(results, key=lambda r: len(r.devices))
    ks = [len(r.devices) for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(7, 2.6))
    ax1.plot(ks, [r.sec_per_epoch for r in results], 'o-',
             label=_('measured'))
    base = results[0].sec_per_epoch * ks[0]
    ax1.plot(ks, [base / k for k in ks], 'k--', label=_('ideal (t1 / k)'))
    ax1.set_xlabel(_('devices'))
    ax1.set_ylabel(_('seconds per epoch'))
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=8)
    ax2.plot(ks, [r.test_acc for r in results], 'o-', color='tab:green')
    ax2.set_xlabel(_('devices'))
    ax2.set_ylabel(_('test accuracy'))
    ax2.set_ylim(0, 1)
    for ax in (ax1, ax2):
        ax.set_xticks(ks)
    if title:
        fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()


def measure_allreduce_with(make_data, synchronize, fns, sizes,
                           device_counts, repeat=3):
    """Time each allreduce of `fns` on `make_data(k, n)` (k arrays of n
    float32 numbers), best of `repeat`. Returns one dict per measurement:
    algorithm, devices, bytes, seconds, and the algorithm and bus
    bandwidths of nccl-tests (busbw = algbw * 2(k-1)/k)."""
    rows = []
    for k in device_counts:
        for n in sizes:
            for fn in fns:
                data = make_data(k, n)
                fn(data)  # warm up
                synchronize()
                best = float('inf')
                for _ in range(repeat):
                    start = time.perf_counter()
                    fn(data)
                    synchronize()
                    best = min(best, time.perf_counter() - start)
                nbytes = 4 * n
                rows.append({'algorithm': fn.__name__, 'devices': k,
                             'bytes': nbytes, 'seconds': best,
                             'algbw': nbytes / best,
                             'busbw': nbytes / best * 2 * (k - 1) / k})
    return rows


def measure_copy_bandwidth_with(copy, synchronize, repeat=5):
    """Bytes read plus written per second by `copy()`, which copies one
    buffer into another and returns its size in bytes (best of `repeat`)."""
    nbytes = copy()
    synchronize()
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter()
        copy()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * nbytes / best


def plot_allreduce(rows, copy_bandwidth=None, link=None, title=None):
    """Time of each allreduce against message size, one panel per device
    count, with a dashed line for the limit that the devices set. On CPU
    stand-ins, all in one memory, that is `copy_bandwidth` (bytes/s, read
    + write, from `copy_bandwidth(cpu())`): k replicas of N bytes must at
    least be read and written once, 2kN bytes. On GPUs the data crosses
    the link between them, so the line is the ring allreduce of the cost
    model on `link` (a key of `LINKS`, from `gpu_link()`), and there is
    none when `link` is None."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    counts = sorted({r['devices'] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(3.3 * len(counts), 2.8),
                             squeeze=False, sharey=True)
    for ax, k in zip(axes[0], counts):
        for algo in dict.fromkeys(r['algorithm'] for r in rows):
            mine = [r for r in rows if r['devices'] == k
                    and r['algorithm'] == algo]
            ax.loglog([r['bytes'] for r in mine],
                      [r['seconds'] for r in mine], 'o-', label=algo)
        xs = sorted({r['bytes'] for r in rows if r['devices'] == k})
        on_gpus = any(r.get('on') == 'gpu' for r in rows
                      if r['devices'] == k)
        if on_gpus and link is not None:
            ax.loglog(xs, [allreduce_time(x, k, link) for x in xs], 'k--',
                      label=_('ring model, {link}').format(
                          link=_cost.as_link(link).label))
        elif not on_gpus and copy_bandwidth:
            ax.loglog(xs, [2 * k * x / copy_bandwidth for x in xs], 'k--',
                      label=_('CPU memory: 2kN bytes at {rate:.3g} GB/s')
                      .format(rate=copy_bandwidth / 1e9))
        ax.set_title((_('{k} GPUs') if on_gpus else _('{k} CPU stand-ins'))
                     .format(k=k), fontsize=10)
        ax.set_xlabel(_('bytes per device'))
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(_('seconds'))
    if title:
        fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()


def plot_drift(drift, title=None):
    """The largest absolute difference between the parameters of two runs
    after each step (`drift`, from `parameter_drift`), on a log scale."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    steps = range(1, len(drift) + 1)
    fig, ax = plt.subplots(figsize=(4.5, 2.6))
    # A difference of exactly 0 has no place on a log scale: draw it at the
    # bottom of the chart
    floor = min([d for d in drift if d > 0], default=1e-9) / 10
    ax.semilogy(steps, [max(d, floor) for d in drift], 'o-', ms=3)
    # Up to 1, the size of a weight: a gap of 1e-6 must look small
    ax.set_ylim(min(floor, 1e-9), max(1.0, 2 * max(drift, default=0)))
    ax.set_xlabel(_('step'))
    ax.set_ylabel(_('largest |difference|'))
    ax.set_title(title or _('parameters on 1 device vs on 2 devices'),
                 fontsize=10)
    plt.tight_layout()
    plt.show()
