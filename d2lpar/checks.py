"""Checks of the lessons' inputs, with messages that say what to do:
device lists, minibatches to split, parameter copies, the arrays of an
allreduce, a reduce-scatter or an all-gather, learning rates and the
settings of `train_concise`.

The lessons show their functions without these checks, as the book does;
the copies that ``make lib`` writes into the backends are wrapped with
`checked`, so that a wrong call of ``d2l.split_batch`` (for example)
still says what to do.
"""
import functools
import inspect
import math
import numbers
from typing import Any, Callable, TypeVar, cast

from d2lpar.i18n import error_message


def check_devices(devices, *, used_later=False):
    """Return `devices` as a non-empty list, or raise a clear error. With
    `used_later`, the caller hands `devices` on to the function it guards,
    so an iterator, which this check would use up, is refused as None
    is."""
    try:
        used_up = used_later and iter(devices) is devices
    except TypeError:
        used_up = False  # not iterable: said below
    if devices is None or isinstance(devices, (str, bytes)) or used_up:
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


F = TypeVar('F', bound=Callable[..., Any])


def checked(fn: F, check) -> F:
    """`fn`, which first passes its arguments to `check`: `check` takes
    the same arguments and raises a clear error about a wrong one. A call
    that does not fit `fn`'s signature goes to `fn` unchecked, so that
    Python's own error names `fn`. (The annotations let an editor show
    `fn`'s parameters for the wrapper.)"""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked_fn(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)
        check(*args, **kwargs)
        return fn(*args, **kwargs)
    return cast(F, checked_fn)


def split_batch_input(X, y, devices):
    """The check of ``split_batch(X, y, devices)``: see `check_split`."""
    check_split(len(X), len(y), check_devices(devices, used_later=True))


def train_batch_input(X, y, device_params, *, devices, **options):
    """The check of ``train_batch(X, y, device_params, devices=...)``: one
    copy of the parameters per device."""
    check_replicas(device_params, check_devices(devices, used_later=True))


def train_input(num_gpus, batch_size, lr, *, devices=None, **options):
    """The check of ``train(num_gpus, ..., devices=...)``: `devices`, when
    given, lists `num_gpus` devices."""
    if devices is None:
        return
    if len(check_devices(devices, used_later=True)) != num_gpus:
        raise ValueError(error_message(
            'train(num_gpus={k}) got a devices list of length {n}: pass a '
            'list of {k} devices, or leave devices out and '
            'd2l.try_devices({k}) picks them.', k=num_gpus, n=len(devices)))


def collective(check_collective, name, same_rows=True):
    """The check of the collective `name` (``reduce_scatter(data)``,
    ``all_gather(shards)``), with the backend's `check_collective`: a
    non-empty list of arrays of one shape (with `same_rows` False, of one
    shape after the first axis)."""
    def check(*args, **kwargs):
        # `checked` has bound the call to the collective's one parameter
        # (data or shards), given by position or by name
        (arrays,) = (*args, *kwargs.values())
        check_collective(arrays, name, same_rows)
    return check


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
