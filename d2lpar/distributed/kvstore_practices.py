"""What lesson 4's MXNet script (kvstore_train.py) does beyond its
training loop: checkpoints (``--checkpoint``), mixed precision
(``--amp``), each worker's shard, accumulating gradients
(``--accumulate``), evaluating in every worker, and saying which machine
was lost (``--comm-timeout``). Lesson 4 shows some of
them (``kvstore_train.save_checkpoint``, ...): kvstore_train imports them
all.
"""
import json
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as onp
import psutil

from d2lpar.mxnet_reach import shims as _shims  # noqa: E402

_shims()  # numpy.bool, distutils: before MXNet loads

import mxnet as mx
from mxnet import autograd, gluon, np

from d2lpar.i18n import N_, _, error_message
from d2lpar.distributed.scripts import (
    check_data_order, say_resumed, write_json)


# --------------------------------------------------------------------------
# Checkpoints and restarts (--checkpoint, --fail-at-step)
# --------------------------------------------------------------------------
CHECKPOINT = 'checkpoint.json'


def save_checkpoint(folder, net, state):
    # The parameters go to folder/epochN.params, then state (epochs and
    # steps done) to folder/checkpoint.json, which names that file. Each
    # is written to a temporary file, then renamed: the JSON file, renamed
    # last, only ever names a whole file of parameters
    os.makedirs(folder, exist_ok=True)
    name = f'epoch{state["epoch"]}.params'
    tmp = os.path.join(folder, f'.{name}.tmp')
    net.save_parameters(tmp)
    os.replace(tmp, os.path.join(folder, name))
    write_json(os.path.join(folder, CHECKPOINT), {**state, 'params': name})
    for old in os.listdir(folder):  # the former epochs' parameters
        if old.endswith('.params') and old != name:
            os.remove(os.path.join(folder, old))


def resume(args, net, ctx, order, rank):
    """Load the checkpoint of ``--checkpoint`` into `net`; return (epochs
    done, steps done), (0, 0) when there is none. Every worker reads it
    (on several machines, from a folder they share): worker 0's values
    initialise the server, and all must know where to go on."""
    if not args.checkpoint:
        return 0, 0
    path = os.path.join(args.checkpoint, CHECKPOINT)
    if not os.path.exists(path):
        return 0, 0
    with open(path) as f:
        state = json.load(f)
    check_data_order(state, order, path)
    net.load_parameters(os.path.join(args.checkpoint, state['params']),
                        ctx=ctx)
    if rank == 0:
        say_resumed(path, state)
    return state['epoch'], state['step']


# --------------------------------------------------------------------------
# Mixed precision (--amp)
# --------------------------------------------------------------------------
AMP_HELP = N_('mixed precision with bfloat16 (mx.contrib.amp), if MXNet '
              'applies it to this network')


def check_amp(net, ctx):
    """Turn on MXNet's AMP with bfloat16 and return the type in which the
    first convolution then computes; a RuntimeError if that is still
    float32, as with MXNet 1.9 and the NumPy interface (``npx.set_np``)."""
    from mxnet.contrib import amp
    amp.init(target_dtype='bfloat16')
    dtype = net[0](np.zeros((1, 1, 28, 28), ctx=ctx)).dtype
    if dtype == onp.float32:
        raise RuntimeError(error_message(
            'mx.contrib.amp.init(target_dtype="bfloat16") left the '
            'convolutions of this network in float32: MXNet {version} casts '
            'only the operators of mx.nd and mx.sym, not those of the NumPy '
            'interface (npx.set_np) that this script uses.',
            version=mx.__version__))
    return str(dtype)


def count_correct(net, X, y, ctx, batch_size=1024):
    """How many examples of (X, y) `net` classifies correctly."""
    correct = 0
    for i in range(0, len(y), batch_size):
        y_hat = net(np.array(X[i:i + batch_size], ctx=ctx))
        correct += int((y_hat.argmax(axis=1).asnumpy() ==
                        y[i:i + batch_size]).sum())
    return correct


def evaluate(net, X, y, ctx, batch_size=1024):
    """The accuracy on the whole of (X, y), in this worker alone."""
    return count_correct(net, X, y, ctx, batch_size) / len(y)


# --------------------------------------------------------------------------
# Practices of real jobs: sharding per worker, accumulating gradients,
# evaluating in every worker
# --------------------------------------------------------------------------
def worker_shard(num_examples, rank, num_workers, epoch, seed=0):
    """The examples that worker `rank` of `num_workers` takes in `epoch`:
    every `num_workers`-th index, from `rank` on, of an order drawn from
    ``(seed, epoch)``. The seed is the same on every worker, so that the
    shards do not overlap; the epoch changes the order every epoch."""
    order = onp.random.default_rng((seed, epoch)).permutation(num_examples)
    return order[rank::num_workers]


def sharded_loader(X, y, batch_size, rank, num_workers, epoch, seed=0,
                   loading_workers=0):
    """A Gluon `DataLoader` over this worker's shard of (X, y) in `epoch`
    (make a new one every epoch); `loading_workers` processes prepare
    the batches while this one trains."""
    shard = worker_shard(len(y), rank, num_workers, epoch, seed).tolist()
    return gluon.data.DataLoader(gluon.data.ArrayDataset(X, y), batch_size,
                                 sampler=shard, last_batch='discard',
                                 num_workers=loading_workers)


def first_indices(num_examples, num_workers, epochs, new_order, count=6,
                  seed=0):
    """{rank: [the first `count` indices of each epoch]} of each worker's
    shard, when the epoch changes the order (`new_order`) or not."""
    return {rank: [worker_shard(num_examples, rank, num_workers,
                                epoch if new_order else 0, seed)[:count]
                   .tolist() for epoch in range(epochs)]
            for rank in range(num_workers)}


def accumulate_gradients(net, loss_fn, X, y, micro_steps, push=None):
    # Backpropagate the summed loss over (X, y) in micro_steps equal
    # micro-batches; with grad_req='add' their gradients add up, and
    # nothing goes to the KVStore until trainer.step (unless push is
    # given: the naive loop). Returns the losses of the last micro-batch
    size = len(y) // micro_steps
    for i in range(micro_steps):
        part = slice(i * size, (i + 1) * size)
        with autograd.record():
            loss = loss_fn(net(X[part]), y[part])
        loss.backward()
        if push is not None and i < micro_steps - 1:
            # The naive loop: a trainer.step per micro-batch, so the
            # server receives and updates after every one
            push()
    return loss


def count_pushes(kv):
    """Count the gradients this worker sends to the servers: wrap the
    KVStore's ``pushpull`` (``trainer.step`` calls it once per
    parameter). Returns a list whose item 0 is the count so far."""
    count, pushpull = [0], kv.pushpull

    def counted(*args, **kwargs):
        count[0] += 1
        return pushpull(*args, **kwargs)
    kv.pushpull = counted
    return count


EVAL_KEY = 999  # a KVStore key that no parameter uses


def evaluate_shared(net, X, y, ctx, kv, batch_size=1024):
    # (correct, total) on the whole of (X, y), counted by all workers:
    # each counts on its share, every k-th example from its rank on.
    # The servers apply their optimizer to all that is pushed; training
    # is over, so worker 0 gives them one that adds each push to the
    # stored value: SGD with learning rate -1, w - (-1) g = w + g
    if kv.rank == 0:
        kv.set_optimizer(mx.optimizer.SGD(learning_rate=-1.0))
    kv.init(EVAL_KEY, np.zeros(2, ctx=mx.cpu()))  # waits for all workers
    share = slice(kv.rank, None, kv.num_workers)
    counts = np.array([count_correct(net, X[share], y[share], ctx,
                                     batch_size), len(y[share])],
                      dtype='float32', ctx=mx.cpu())
    kv.push(EVAL_KEY, counts)  # the servers add up the pushes
    total = np.zeros(2, ctx=mx.cpu())
    kv.pull(EVAL_KEY, out=total)  # once every worker has pushed
    correct, size = total.asnumpy().tolist()
    return int(correct), int(size)


# --------------------------------------------------------------------------
# Several machines: which one a failure lost (--comm-timeout)
# --------------------------------------------------------------------------
ADDRESS_KEY = 998  # another key that no parameter uses


def own_address():
    """This machine's IPv4 address on the route to the scheduler
    (DMLC_PS_ROOT_URI; on one machine: loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # No packet is sent: connecting a UDP socket picks the route
        s.connect((os.environ.get('DMLC_PS_ROOT_URI', '127.0.0.1'), 9))
        return s.getsockname()[0]


def roll_call(kv):
    """Every worker's (address, port), rank by rank. Each worker listens
    on a port of its own address, which only tells whether the worker is
    still there (the kernel answers; nothing is read), and fills its row
    of a table; the servers add up the tables that the workers push (no
    optimizer is set yet: a server keeps the sum of the pushes), and every
    worker pulls the whole table. Returns the rows and the listening
    socket, which must stay open."""
    address = own_address()
    listener = socket.create_server((address, 0))
    table = onp.zeros((kv.num_workers, 5), dtype='float32')
    table[kv.rank] = [*map(int, address.split('.')),
                      listener.getsockname()[1]]
    kv.init(ADDRESS_KEY, np.zeros(table.shape, ctx=mx.cpu()))
    kv.push(ADDRESS_KEY, np.array(table, ctx=mx.cpu()))
    total = np.zeros(table.shape, ctx=mx.cpu())
    kv.pull(ADDRESS_KEY, out=total)
    rows = total.asnumpy().astype(int).tolist()
    return [('.'.join(map(str, row[:4])), row[4]) for row in rows], listener


def answers(address, port, timeout=3.0):
    """Whether the worker listening on (`address`, `port`) is still there:
    False when its process ended (the connection is refused) or when its
    machine no longer answers (the network to it is cut)."""
    try:
        socket.create_connection((address, port), timeout).close()
    except OSError:
        return False
    return True


class Watchdog:
    """End this worker when what it waits for inside ``with watchdog:``
    takes more than `timeout` seconds. ps-lite, under MXNet's parameter
    server, has no timeout: a worker whose peers are gone waits for their
    gradients for ever. Before it ends, the worker says which machines
    no longer answer and which ranks they ran (from `roll_call`), and
    stops the scheduler and server of its own machine, which would wait
    for ever too."""

    def __init__(self, timeout, rank, workers, listener):
        self.timeout, self.rank, self.workers = timeout, rank, workers
        self.listener = listener  # open while this worker runs
        self.mine = listener.getsockname()[0]  # this machine's address
        self.deadline = None
        threading.Thread(target=self._watch, daemon=True).start()

    def __enter__(self):
        self.deadline = time.monotonic() + self.timeout

    def __exit__(self, *exc):
        self.deadline = None

    def _watch(self):
        while self.deadline is None or time.monotonic() < self.deadline:
            time.sleep(0.2)
        try:
            self._say_lost()
            stop_local_servers()
        finally:
            os._exit(1)

    def _say_lost(self):
        sys.stdout.write(_(
            'd2lpar: worker {rank} waited {seconds:.0f} s for the others '
            '(--comm-timeout): stopping.').format(
                rank=self.rank, seconds=self.timeout) + '\n')
        with ThreadPoolExecutor(len(self.workers)) as pool:
            alive = list(pool.map(lambda w: answers(*w), self.workers))
        lost = dict.fromkeys(address for (address, _port), ok
                             in zip(self.workers, alive)
                             if not ok and address != self.mine)
        for address in lost:
            ranks = ', '.join(str(r) for r, (a, _port)
                              in enumerate(self.workers) if a == address)
            sys.stdout.write(_(
                'd2lpar: rank {rank} lost the machine {host} (ranks '
                '{ranks}): its processes ended or the network to it is '
                'cut.').format(rank=self.rank, host=address, ranks=ranks)
                + '\n')
        sys.stdout.flush()


def stop_local_servers():
    """Kill the scheduler and servers of this job (the same
    DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT) that run on this machine."""
    job = [os.environ.get(k) for k in ('DMLC_PS_ROOT_URI',
                                       'DMLC_PS_ROOT_PORT')]
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if (env.get('DMLC_ROLE') in ('scheduler', 'server')
                    and [env.get('DMLC_PS_ROOT_URI'),
                         env.get('DMLC_PS_ROOT_PORT')] == job
                    and same_network(proc.pid)):
                proc.kill()
        except psutil.Error:  # gone, or not ours
            pass


def same_network(pid):
    """Whether process `pid` sees the network that this one sees: on one
    machine, always, except where network namespaces (Linux) give
    processes machines of their own, as the tests do."""
    try:
        return (os.stat(f'/proc/{pid}/ns/net').st_ino
                == os.stat('/proc/self/ns/net').st_ino)
    except OSError:  # no /proc: not Linux
        return True
