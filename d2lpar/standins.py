"""CPU stand-ins for GPUs, written once for both backends.

A GPU is a compute resource of its own with a queue of work: Python queues
a kernel on one of its streams and moves on, and the GPU runs the queue in
order. A CPU stand-in is built the same way: a fixed share of the CPU's
cores (`threads_per_stand_in`) and, for each of its queues (``'compute'``,
``'copy'``), one worker thread that runs what is queued there in order.
Two stand-ins are therefore two devices that compute at the same time, each
on its own half of the cores, and one stand-in alone has only its half.

The backends say how a worker limits itself to its share (PyTorch:
``torch.set_num_threads`` in the worker thread sets that thread's count).
"""
import concurrent.futures
import threading
import time

QUEUES = ('compute', 'copy')


def threads_per_stand_in(num_threads):
    """Every stand-in gets half of the `num_threads` the CPU computes
    with: two stand-ins split the CPU in two, and one stand-in alone
    compares like with like against two of them."""
    return max(1, num_threads // 2)


def check_queue(queue):
    """A ValueError unless `queue` names one of a device's queues."""
    if queue not in QUEUES:
        raise ValueError(f"queue must be 'compute' or 'copy', got "
                         f'{queue!r}.')


def resolve(args):
    """`args` with every Future, also inside lists and tuples, replaced by
    its result (waiting for it, the way a CUDA stream waits for an event
    recorded on another stream)."""
    def value(a):
        if isinstance(a, concurrent.futures.Future):
            return a.result()
        if isinstance(a, (list, tuple)):
            return type(a)(value(b) for b in a)
        return a
    return [value(a) for a in args]


def done(value):
    """A Future that already holds `value` (work a GPU has queued, or the
    whole CPU has finished)."""
    future = concurrent.futures.Future()
    future.set_result(value)
    return future


class _Recorder:
    """Spans of the work the workers ran while a timeline was recording."""

    def __init__(self):
        self.lock, self.spans, self.active = threading.Lock(), [], 0

    def start(self):
        with self.lock:
            self.active += 1
            self.spans = [] if self.active == 1 else self.spans

    def stop(self):
        with self.lock:
            self.active -= 1
            return list(self.spans)

    def add(self, span):
        with self.lock:
            if self.active:
                self.spans.append(span)


recorder = _Recorder()


class StandIns:
    """The worker threads of every stand-in of one process, one per
    device (any hashable name) and queue, started when first needed.

    `set_threads(n)` is called once in each new worker so that it computes
    with `n` threads. Work is queued with `submit`; `wait` waits for what
    was queued on some devices and raises the first error of their work
    in the caller, with its own type and message."""

    def __init__(self, set_threads, num_threads):
        self.set_threads, self.num_threads = set_threads, num_threads
        self._pools, self._pending = {}, {}
        self._lock = threading.Lock()

    def _pool(self, device, queue):
        check_queue(queue)
        key = (device, queue)
        with self._lock:
            if key not in self._pools:
                threads = 1 if queue == 'copy' else self.num_threads
                self._pools[key] = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix=f'd2lpar-{device}-{queue}',
                    initializer=self.set_threads, initargs=(threads,))
                self._pending[key] = []
            return self._pools[key]

    def submit(self, device, queue, fn, args, row):
        """Queue ``fn(*args)`` on `device`'s `queue`; return its Future."""
        pool = self._pool(device, queue)
        kind = 'copy' if queue == 'copy' else 'compute'
        label = getattr(fn, '__name__', 'work')

        def work():
            values = resolve(args)
            start = time.perf_counter()
            try:
                return fn(*values)
            finally:
                recorder.add((label, row, start, time.perf_counter(), kind))

        future = pool.submit(work)
        with self._lock:
            pending = self._pending[(device, queue)]
            pending[:] = [f for f in pending if not f.done()] + [future]
        return future

    def wait(self, devices=None):
        """Wait for all the work queued on `devices` (None: on all of
        them). On an
        interrupt (or any error while waiting) the work that has not
        started yet is cancelled, so nothing runs on behind the caller's
        back; the worker threads stay, ready for the next work."""
        with self._lock:
            keys = [k for k in self._pending
                    if devices is None or k[0] in devices]
            futures = [f for k in keys for f in self._pending[k]]
            for k in keys:
                self._pending[k] = []
        try:  # short waits, so that an interrupt is seen at once
            while concurrent.futures.wait(futures, timeout=0.1).not_done:
                pass
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        for f in futures:  # in the order they were queued
            if not f.cancelled() and f.exception() is not None:
                raise f.exception()

    def threads(self):
        """The worker threads started so far (for tests)."""
        return [t for p in self._pools.values() for t in p._threads]
