"""What lesson 4's MXNet script (d2lpar.kvstore_train) does beyond its
training loop: checkpoints (``--checkpoint``), mixed precision
(``--amp``), each worker's shard, accumulating gradients
(``--accumulate``) and evaluating in every worker. Lesson 4 shows some of
them (``kvstore_train.save_checkpoint``, ...): kvstore_train imports them
all.
"""
import json
import os

import numpy as onp

from d2lpar.mxnet_reach import shims as _shims  # noqa: E402

_shims()  # numpy.bool, distutils: before MXNet loads

import mxnet as mx
from mxnet import autograd, gluon, np

from d2lpar.i18n import N_, _, error_message
from d2lpar.scripts import check_data_order, say_resumed, write_json


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


def accumulate_gradients(net, loss_fn, X, y, micro_steps):
    # Backpropagate the summed loss over (X, y) in micro_steps equal
    # micro-batches; with grad_req='add' their gradients add up, and
    # nothing goes to the KVStore until trainer.step. Returns the losses
    # of the last micro-batch
    size = len(y) // micro_steps
    for i in range(micro_steps):
        part = slice(i * size, (i + 1) * size)
        with autograd.record():
            loss = loss_fn(net(X[part]), y[part])
        loss.backward()
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
