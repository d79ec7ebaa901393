"""CPU stand-ins for GPUs, written once for both backends.

A GPU is a compute resource of its own with a queue of work: Python queues
a kernel on one of its streams and moves on, and the GPU runs the queue in
order. A CPU stand-in is built the same way: a fixed share of the CPU's
cores (`threads_per_stand_in`) and, for each of its queues (``'compute'``,
``'copy'``), one worker thread that runs what is queued there in order.
Two stand-ins are therefore two devices that compute at the same time, each
on its own half of the cores, and one stand-in alone has only its half.

PyTorch computes CPU operators in the calling thread, so ``d2lpar.torch``
uses the workers below (``torch.set_num_threads`` in a worker sets that
thread's count). MXNet's engine already gives every context ``cpu(i)`` a
thread of its own; ``d2lpar.mxnet`` sets its share of the cores
(``OMP_NUM_THREADS``) and enough temporary workspaces before MXNet loads,
and sends the copies of a stand-in's copy queue to the engine's threads
for prioritised CPU work (MXNet would copy on the source context's thread).
"""
import concurrent.futures
import queue
import threading
import time

from d2lpar.i18n import error_message

QUEUES = ('compute', 'copy')


def threads_per_stand_in(num_threads):
    """Every stand-in gets half of the `num_threads` the CPU computes
    with: two stand-ins split the CPU in two, and one stand-in alone
    compares like with like against two of them."""
    return max(1, num_threads // 2)


def check_queue(queue):
    """A ValueError unless `queue` names one of a device's queues."""
    if queue not in QUEUES:
        raise ValueError(error_message(
            "queue must be 'compute' or 'copy', got {queue!r}.", queue=queue))


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


def flat(values):
    """The items of `values`, with lists and tuples inside it opened."""
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from flat(v)
        else:
            yield v


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


class Job(concurrent.futures.Future):
    """A Future for work queued on a stand-in. Its error is reported once:
    by `result()` or by `StandIns.wait`, whichever comes first."""
    reported = False

    def result(self, timeout=None):
        try:
            return super().result(timeout)
        except concurrent.futures.TimeoutError:
            raise
        except BaseException:
            self.reported = True
            raise


class StandIns:
    """The worker threads of every stand-in of one process, one per
    device (any hashable name) and queue, started when first needed.

    `set_threads(n)` is called once in each new worker so that it computes
    with `n` threads. Work is queued with `submit`; `wait` waits for what
    was queued on some devices and raises the first error of their work
    in the caller, with its own type and message."""

    def __init__(self, set_threads, num_threads):
        self.set_threads, self.num_threads = set_threads, num_threads
        self._queues, self._pending = {}, {}
        self._lock = threading.Lock()

    def _queue(self, key):
        with self._lock:
            if key not in self._queues:
                self._queues[key], self._pending[key] = queue.SimpleQueue(), []
                threads = 1 if key[1] == 'copy' else self.num_threads
                threading.Thread(target=self._work, daemon=True,
                                 name=f'd2lpar-{key[0]}-{key[1]}',
                                 args=(self._queues[key], threads)).start()
            return self._queues[key]

    def _work(self, todo, num_threads):
        """A worker: run the jobs of its queue in order, for ever."""
        self.set_threads(num_threads)
        while True:
            job, work = todo.get()
            if not job.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                job.set_result(work())
            except BaseException as e:  # raised in the caller instead
                job.set_exception(e)

    def submit(self, device, queue_name, fn, args, row):
        """Queue ``fn(*args)`` on `device`'s queue `queue_name`; return
        its `Job`."""
        kind = 'copy' if queue_name == 'copy' else 'compute'
        label = getattr(fn, '__name__', 'work')

        def work():
            values = resolve(args)
            start = time.perf_counter()
            try:
                return fn(*values)
            finally:
                recorder.add((label, row, start, time.perf_counter(), kind))

        key, job = (device, queue_name), Job()
        todo = self._queue(key)
        with self._lock:  # forget what is done and has nothing to report
            self._pending[key] = [j for j in self._pending[key]
                                  if not _settled(j)] + [job]
        todo.put((job, work))
        return job

    def wait(self, devices=None):
        """Wait for all the work queued on `devices` (None: on all of
        them), and raise the first error not yet reported. On an interrupt
        (or any error while waiting) the work that has not started yet is
        cancelled; what is running stays pending, for the next wait."""
        with self._lock:
            jobs = [j for key, pending in self._pending.items()
                    if devices is None or key[0] in devices
                    for j in pending]
        try:  # short waits, so that an interrupt is seen at once
            while concurrent.futures.wait(jobs, timeout=0.1).not_done:
                pass
        except BaseException:
            for j in jobs:
                j.cancel()
            raise
        for j in jobs:  # in the order they were queued
            if not j.cancelled() and j.exception() and not j.reported:
                j.reported = True
                raise j.exception()

    def busy(self):
        """The (device, queue) of the stand-ins with work queued or
        running."""
        with self._lock:
            return sorted((key for key, pending in self._pending.items()
                           if any(not j.done() for j in pending)), key=str)


def _settled(job):
    """Whether `job` is done and has no error left to report."""
    return job.done() and (job.cancelled() or job.exception() is None
                           or job.reported)
