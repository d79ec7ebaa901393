"""What the two training scripts (ddp_train.py, kvstore_train.py) share:
their command-line options (checkpoints and restarts too), the shard of
each step, and results written atomically. The failures that lesson 4
and the tests ask for are in faults.py.
"""
import os
import sys

from d2lpar.distributed import faults
from d2lpar.i18n import _, error_message
from d2lpar.training import epoch_shards


def training_arguments(doc, who, *, amp_help, naive_help):
    """The command-line options that both training scripts share, under
    the first paragraph of the script's `doc` (`who` names the processes:
    'processes' or 'workers'; `amp_help` and `naive_help`, marked with N_,
    say what ``--amp`` and ``--naive-accumulate`` do in this framework);
    each script adds its own and calls `parse_training_arguments`."""
    import argparse
    p = argparse.ArgumentParser(description=doc.split('\n\n')[0])
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
    p.add_argument('--accumulate', type=int, default=1,
                   help=_('micro-batches per step: gradients are added up '
                          'over them and communicated once per step'))
    p.add_argument('--optimizer', choices=['sgd', 'adam'], default='sgd',
                   help=_('adam keeps two numbers of state per parameter'))
    p.add_argument('--naive-accumulate', action='store_true',
                   help=_(naive_help))
    p.add_argument('--amp', action='store_true', help=_(amp_help))
    p.add_argument('--comm-timeout', type=float, default=120, help=_(
        'seconds a collective may wait before it fails (a machine lost)'))
    checkpoint_arguments(p)
    faults.add_arguments(p)  # failures on purpose (lesson 4, the tests)
    return p


def parse_training_arguments(p, argv=None):
    """`p.parse_args(argv)`, and an error of `p` (usage and exit code 2)
    for options that cannot go together."""
    args = p.parse_args(argv)
    if args.naive_accumulate and args.accumulate < 2:
        p.error(_('--naive-accumulate needs --accumulate 2 or more: with '
                  'one micro-batch per step nothing can be sent early'))
    return args


def shard_size(args, world):
    """The examples each of `world` processes takes from every global batch
    (``--batch-size``); a ValueError when the batch cannot be cut into
    equal shards, or a shard into ``--accumulate`` equal micro-batches."""
    B = args.batch_size
    if B % world:
        raise ValueError(error_message(
            '--batch-size {B} cannot be cut into {world} equal shards: pass '
            'a multiple of {world}.', B=B, world=world))
    b = B // world
    if args.accumulate < 1 or b % args.accumulate:
        raise ValueError(error_message(
            'A shard of {b} examples cannot be cut into {n} equal '
            'micro-batches (--accumulate).', b=b, n=args.accumulate))
    return b


def training_data(args, global_batch):
    """(X_train, y_train, X_test, y_test, source) of ``--num-train`` and
    ``--num-test`` examples; a ValueError when the training set makes no
    global batch."""
    from d2lpar.data import fashion_mnist_arrays
    data = fashion_mnist_arrays(args.num_train, args.num_test)
    if len(data[1]) < global_batch:
        raise ValueError(error_message(
            '{n} training examples make no global batch of {B}.',
            n=len(data[1]), B=global_batch))
    return data


def shards_of_epoch(args, num_examples, rank, world, epoch, step,
                    first_shards):
    """For the training scripts: this rank's shard of every global batch of
    `epoch`, as ``(step, indices)`` with the step counted on from `step`;
    the first shard of the epoch is appended to `first_shards` (the
    results show that the order changes from epoch to epoch)."""
    for idx in epoch_shards(num_examples, args.batch_size, rank=rank,
                            world_size=world,
                            seed=(args.seed, epoch)):
        step += 1
        if len(first_shards) == epoch:
            first_shards.append(idx.tolist())
        faults.at_step(args, step, rank, world)  # when asked to fail
        yield step, idx


def checkpoint_arguments(p):
    """The options of checkpoints and restarts, for both scripts."""
    p.add_argument('--checkpoint', metavar='DIR', default=None,
                   help=_('save a checkpoint there after every epoch, and '
                          'resume from it'))


def check_data_order(state, order, path):
    """Refuse a checkpoint (its dict `state`, read from `path`) of a run
    whose data came in another order than this run's `order`: the order
    of epoch e is drawn from (seed, e), so the same seed, data and global
    batch give the same order as before the failure."""
    if state['data_order'] != order:
        raise ValueError(error_message(
            'The checkpoint {path} belongs to a run with {saved}, not {now}: '
            'remove it, or pass the same --seed, --num-train and '
            '--batch-size.', path=path, saved=state['data_order'],
            now=order))


def say_resumed(path, state):
    """What rank 0 prints when it resumes from the checkpoint `path`."""
    print(_('resuming from {path}: {epochs} epoch(s), {steps} steps '
            'done').format(path=path, epochs=state['epoch'],
                           steps=state['step']), flush=True)


def write_json(path, data):
    """Write `data` as JSON atomically: a reader never sees half a file."""
    import json
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def write_npz(path, arrays):
    """Write `arrays` (name: NumPy array) as numpy.savez does, atomically:
    a reader never sees half a file."""
    import numpy as np
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:  # a file, not a name: savez adds no .npz
        np.savez(f, **arrays)
    os.replace(tmp, path)


def leave_now(rank=None):
    """End a PyTorch script whose results are written and whose process
    group is gone (after `faults.at_exit`, for process `rank`). At the
    interpreter's normal exit, a C++ thread of PyTorch's collectives
    sometimes ends the process with SIGABRT ("terminate called without an
    active exception", seen once in a lesson 5 FSDP run on two busy
    cores), which would fail a run that has finished."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    faults.at_exit(rank)  # when the tests ask this rank to abort
    os._exit(0)
