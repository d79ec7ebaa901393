"""Timing on devices that run asynchronously: `Benchmark` waits for the
devices before it reads the clock, and the best of several runs of an
allreduce or a memory copy.
"""
import time

from d2lpar.checks import check_devices
from d2lpar.i18n import _, error_message


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
        return cls.best(description, 1)

    @classmethod
    def best(cls, description, n):
        """The shortest of the `n` latest times measured under
        `description` (fewer if fewer were measured), in seconds: a single
        run varies with whatever else the machine is doing."""
        if n < 1:
            raise ValueError(error_message(
                'best keeps the shortest of the n latest times: n is 1 or '
                'more, got {n!r}.', n=n))
        times = [seconds for name, seconds in cls.records
                 if name == description][-n:]
        if not times:
            raise KeyError(error_message(
                'Nothing was measured as {description!r} yet: run the '
                'cell that times it first.', description=description))
        return min(times)


def best_seconds(fn, synchronize, repeat):
    """The shortest of `repeat` runs of ``fn()``, each timed until
    ``synchronize()`` says the devices are done, in seconds."""
    best = float('inf')
    for _run in range(repeat):
        start = time.perf_counter()
        fn()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def measure_allreduce(backend, fns, sizes, device_lists, repeat=3):
    """Time each allreduce of `fns` on the devices of each list of
    `device_lists`, one array of n float32 zeros (no overflow, however
    often summed) on each device for each n of `sizes`, best of `repeat`,
    with `backend`'s arrays. Returns one dict per measurement: algorithm,
    devices, bytes, seconds, and the algorithm and bus bandwidths of
    nccl-tests (busbw = algbw * 2(k-1)/k)."""
    rows = []
    for devices in device_lists:
        k = len(devices)
        for n in sizes:
            for fn in fns:
                data = [backend.full(n, 0.0, device) for device in devices]
                fn(data)  # warm up
                backend.synchronize()
                best = best_seconds(lambda: fn(data), backend.synchronize,
                                    repeat)
                nbytes = 4 * n
                rows.append({'algorithm': fn.__name__, 'devices': k,
                             'bytes': nbytes, 'seconds': best,
                             'algbw': nbytes / best,
                             'busbw': nbytes / best * 2 * (k - 1) / k})
    return rows


def measure_copy_bandwidth(backend, device, num_bytes, repeat=5):
    """Bytes read plus written per second when `device` copies a buffer of
    `num_bytes` into another (best of `repeat`), with `backend`'s arrays."""
    x, y = [backend.full(num_bytes // 4, 1.0, device) for _ in range(2)]

    def copy():
        backend.copy_into(x, y)

    copy()  # warm up
    backend.synchronize()
    return 2 * num_bytes / best_seconds(copy, backend.synchronize, repeat)
