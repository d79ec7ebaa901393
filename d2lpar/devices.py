"""Devices, framework-free: what `try_devices` says when it falls back to
CPU stand-ins, how many of lesson 1's products fit into a GPU's free
memory, and which GPU (or the CPU) each training process takes.
"""
import numpy as np

from d2lpar.checks import check_devices
from d2lpar.i18n import _, error_message, ngettext


def fallback_notice(num_wanted, num_found, threads_each, stand_ins):
    """Say in plain words what `try_devices` fell back to: CPU stand-ins
    with `threads_each` CPU threads each, half of the CPU's."""
    found = (_('No GPU found') if num_found == 0 else
             _('Only {num_found} GPU(s) found').format(num_found=num_found))
    if num_wanted == 1:
        share = _('half of the CPU: a second stand-in would take the other '
                  'half')
    elif num_wanted == 2:
        share = _('two of them split the CPU in two')
    else:
        share = _('{n} of them share cores meant for two').format(
            n=num_wanted)
    return ngettext(
        '{found}, {n} device requested: using {n} CPU stand-in '
        '({stand_ins}), computing with {threads} CPU thread(s) of its own '
        '({share}).',
        '{found}, {n} devices requested: using {n} CPU stand-ins '
        '({stand_ins}), each computing with {threads} CPU thread(s) of its '
        'own ({share}).', num_wanted).format(
            found=found, n=num_wanted, stand_ins=stand_ins,
            threads=threads_each, share=share)


def products_that_fit(backend, num_products, shape, devices):
    """What both backends' `products_that_fit` share, with `backend`:
    ``backend.free_bytes(device)`` gives the bytes free on `device` when it
    is a GPU, None for any other device."""
    devices = check_devices(devices)
    if not isinstance(num_products, int) or num_products < 1:
        raise ValueError(error_message(
            'num_products must be an int >= 1, got {num_products!r}.',
            num_products=num_products))
    each = 4 * int(np.prod(shape))  # one float32 result
    fit = num_products
    for device in devices:
        free = backend.free_bytes(device)
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
