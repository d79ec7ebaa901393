"""Data-parallel training of the lessons' LeNet with MXNet's distributed
KVStore (a parameter server): one scheduler, servers, and one worker
process per device, on one machine or on several.

Every process runs this same script; the environment says which role it
plays. On one machine, with one server and two workers::

    export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=9091 \\
           DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2
    DMLC_ROLE=scheduler python -m d2lpar.distributed.kvstore_train --out OUT &
    DMLC_ROLE=server python -m d2lpar.distributed.kvstore_train --out OUT &
    DMLC_ROLE=worker python -m d2lpar.distributed.kvstore_train --out OUT &
    DMLC_ROLE=worker python -m d2lpar.distributed.kvstore_train --out OUT

On several machines the same, with DMLC_PS_ROOT_URI the address of the
machine that runs the scheduler, a server per machine and DMLC_NUM_SERVER,
DMLC_NUM_WORKER counting all of them. From Python,
``d2lpar.distributed.launch_kvstore`` starts them all on loopback, and
``d2lpar.distributed.command_for_machines`` writes the command lines.

A worker trains on GPU i when it is worker i of the G on its machine
(D2LPAR_LOCAL_RANK=i, D2LPAR_LOCAL_WORKERS=G; by default its rank among
all DMLC_NUM_WORKER workers) and MXNet sees at least G GPUs there; else
every worker trains on the CPU, as ``d2lpar.distributed.ddp_train`` does.

A scheduler or server never gets past ``import mxnet``: MXNet sees its
role, serves inside the import until the workers are done, then exits.

Each worker takes a contiguous shard of every global batch
(``--batch-size``) and backpropagates the *sum* of its losses. With
``dist_sync`` the server adds the gradients that all workers push, applies
SGD with ``rescale_grad = 1 / global batch`` (``trainer.step(B)``), and
the workers pull the new weights: the same step as one process taking the
whole global batch. The optimizer is MXNet's SGD, or Adam with ``--optimizer
adam``, as subclassed in ``d2lpar.distributed.kvstore_state``: each server also
writes the bytes of the optimizer state that it creates to
OUT/server<i>.json, and each worker notes those of its own updater, which
stays empty while the servers update. With several servers (and a small
MXNET_KVSTORE_BIGARRAY_BOUND), each server keeps only its shard of that
state: ZeRO-1 on the servers (``distributed.train(..., sharded=True)``).
Every worker starts from the values that `initial_params` draws after
``mx.random.seed(seed)``; worker 0's values initialise the server anyway.

Timing, per worker and step (MXNet is asynchronous: the clock stops after
waiting for the results). *Compute*: forward and backward. *Communication*:
``trainer.step``, i.e. pushing the gradients, the server's update, and
pulling the weights; step 1 includes the KVStore's setup (worker 0 pushes
the initial weights). *Total*: the training loop. Writes
OUT/worker{rank}.json per worker and, on worker 0, OUT/params_step1.npz
and OUT/result.json with the test accuracy.

With ``--checkpoint DIR`` worker 0 saves the parameters and the number
of epochs and steps done after every epoch (`save_checkpoint`), and a run
that finds a checkpoint there goes on after its last epoch (`resume`).
The dist KVStore cannot replace a worker that died: the server would wait
for its gradients forever. So ``launch_kvstore(..., max_restarts=1)``
stops the whole job when a process fails and starts a new scheduler,
server and workers, which resume from the checkpoint. The optimizer runs
on the server, and ``trainer.save_states`` refuses to save its state in
distributed training; our SGD has none besides the count of updates,
which the learning-rate schedule reads, so the checkpoint keeps that
count and the new optimizer starts from it (``begin_num_update``).
On several machines nothing in ps-lite notices a machine that is gone:
the others would wait for its gradients for ever. So each worker tells
the others where it runs (``roll_call``), and a ``Watchdog`` ends it
when a step waits more than ``--comm-timeout`` seconds (120): it says
which machines no longer answer and which ranks they ran, and stops the
scheduler and server of its own machine.
``--fail-at-step N`` makes the last worker kill itself with SIGKILL at
step N, the first time only. ``--amp`` asks MXNet's automatic mixed
precision (``mx.contrib.amp``) for bfloat16, and stops with an error
when it leaves the network in float32 (MXNet 1.9 casts only the
operators of ``mx.nd`` and ``mx.sym``, not those of the NumPy interface
used here).

With ``--accumulate N`` each worker cuts its shard into N micro-batches
whose gradients add up (``grad_req='add'``) and pushes once per step;
``count_pushes`` counts the pushes. ``--naive-accumulate`` calls
``trainer.step`` after every micro-batch instead, as a naive loop does:
as many pushes, and server updates, as micro-batches. At the end every
worker counts the correct answers on its share of the test set and the
servers add up the counts (``evaluate_shared``); worker 0 also
evaluates alone, for comparison. ``worker_shard`` and ``sharded_loader``
shard data per worker, in a new order every epoch.
"""
import contextlib
import os
import socket
import sys
import time
import traceback

from d2lpar.mxnet_reach import shims as _shims  # noqa: E402

_shims()  # numpy.bool, distutils: before MXNet loads

import mxnet as mx  # a scheduler or server serves in here, then exits
from mxnet import gluon, np, npx
from mxnet.gluon import nn

from d2lpar.distributed import kvstore_state
from d2lpar.devices import choose_gpu
from d2lpar.i18n import N_, _, error_message
from d2lpar.distributed.kvstore_practices import (  # noqa: F401 (lesson 4 shows them)
    AMP_HELP, CHECKPOINT, Watchdog, accumulate_gradients, check_amp,
    count_correct, count_pushes, evaluate, evaluate_shared, first_indices,
    resume, roll_call, save_checkpoint, sharded_loader, worker_shard)
from d2lpar.distributed.scripts import (
    parse_training_arguments, shard_size, shards_of_epoch, training_arguments,
    training_data, write_json, write_npz)

npx.set_np()


def lenet(params, ctx):
    """The lessons' LeNet (``d2l.lenet``) as Gluon layers on the contexts
    `ctx`, holding the values of `params`, a list like the one
    ``d2l.lenet_params()`` returns (fully connected weights as (in, out)).
    The benchmark (tools/bench) uses it too."""
    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, 3, activation='relu', in_channels=1),
            nn.AvgPool2D(2, 2),
            nn.Conv2D(50, 5, activation='relu', in_channels=20),
            nn.AvgPool2D(2, 2),
            nn.Dense(128, activation='relu', in_units=800),
            nn.Dense(10, in_units=128))
    net.initialize(ctx=ctx)
    for p, v in zip(net.collect_params().values(), params):
        p.set_data(v.T if v.ndim == 2 else v)  # Dense keeps (out, in)
    return net


def initial_params(seed):
    """The values every worker starts from, in the layout of
    ``d2l.lenet_params()``: N(0, 0.1) weights and zero biases, drawn after
    mx.random.seed(seed)."""
    mx.random.seed(seed)
    params = []
    for shape in ((20, 1, 3, 3), (50, 20, 5, 5), (800, 128), (128, 10)):
        outputs = shape[0] if len(shape) == 4 else shape[1]
        params += [np.random.normal(scale=0.1, size=shape),
                   np.zeros(outputs)]
    return params


def named_params(net):
    """{'0.weight': array, ...}, named by layer index like PyTorch."""
    return {f'{i}.{kind}': getattr(net[i], kind).data().asnumpy()
            for i in range(len(net)) for kind in ('weight', 'bias')
            if getattr(net[i], kind, None) is not None}


NAIVE_HELP = N_('with --accumulate: call trainer.step after every '
                'micro-batch, as a naive loop does, so that every '
                'micro-batch is pushed and the server updates after each')


def parse_args(argv=None):
    p = training_arguments(__doc__, 'workers', amp_help=AMP_HELP,
                           naive_help=NAIVE_HELP)
    p.add_argument('--kvstore', default='dist_sync',
                   help=_('dist_sync, dist_async, ... or local (no '
                          'servers)'))
    return parse_training_arguments(p, argv)


def main(argv=None):
    args = parse_args(argv)
    if args.kvstore.startswith('dist') and 'DMLC_ROLE' not in os.environ:
        raise SystemExit(error_message(
            'No DMLC_ROLE in the environment: start a scheduler, servers '
            'and workers (see python -m d2lpar.distributed.kvstore_train '
            '--help), or use d2lpar.distributed.launch_kvstore.'))
    kv = mx.kv.create(args.kvstore)
    rank, world = kv.rank, kv.num_workers
    # The launcher reads this line, so it stays in English
    print(f'd2lpar: worker rank {rank} of {world}, pid {os.getpid()}',
          flush=True)
    if args.kvstore.startswith('dist') and 'async' not in args.kvstore:
        # Who runs where, for the watchdog to say which machine it lost
        # (the roll call adds tables on the servers: synchronous only)
        workers, listener = roll_call(kv)
        watchdog = Watchdog(args.comm_timeout, rank, workers, listener)
    else:
        watchdog = contextlib.nullcontext()
    B = args.batch_size
    b = shard_size(args, world)  # this worker's shard of every global batch
    local_rank = int(os.environ.get('D2LPAR_LOCAL_RANK', rank))
    local_workers = int(os.environ.get('D2LPAR_LOCAL_WORKERS', world))
    gpu, notice = choose_gpu(
        0 if args.cpu else mx.context.num_gpus(), local_rank, local_workers)
    if notice and local_rank == 0:
        print(f'd2lpar: {notice}', flush=True)
    ctx = mx.cpu() if gpu is None else mx.gpu(gpu)

    X_train, y_train, X_test, y_test, source = training_data(args, B)
    net = lenet(initial_params(args.seed), ctx)
    net.hybridize()
    amp_dtype = check_amp(net, ctx) if args.amp else None
    order = {'seed': args.seed, 'num_train': len(y_train), 'batch_size': B}
    # Go on after the last epoch of a checkpoint, if there is one
    done, step = resume(args, net, ctx, order, rank)
    # The optimizer runs on the server, so the learning rate follows a
    # schedule given to it: the cosine decay of ddp_train. MXNet counts
    # updates from 1; one warm-up step at args.lr shifts the cosine by one
    # step, so that update n gets learning_rate(n - 1, ...)
    total_steps = len(y_train) // B * args.epochs
    schedule = mx.lr_scheduler.CosineScheduler(
        total_steps + 1, args.lr, warmup_steps=1, warmup_begin_lr=args.lr)
    kind = kvstore_state.Adam if args.optimizer == 'adam' else \
        kvstore_state.SGD  # MXNet's, counting what the servers hold
    optimizer = kind(learning_rate=args.lr, lr_scheduler=schedule,
                     # after a restart: the updates done
                     begin_num_update=step)
    optimizer.out_dir = os.path.abspath(args.out)
    trainer = gluon.Trainer(net.collect_params(), optimizer, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()  # one loss per example
    pushes = count_pushes(kv)  # pushes[0]: gradients sent so far
    if args.accumulate > 1:  # backward adds to the gradients
        for param in net.collect_params().values():
            param.grad_req = 'add'
    compute, communication = 0.0, 0.0
    pushed = [0.0]  # seconds of this step's early pushes

    def push_now():  # --naive-accumulate: after a micro-batch, not a step
        t = time.perf_counter()
        with watchdog:
            trainer.step(B)
            net.collect_params().zero_grad()
            npx.waitall()
        pushed[0] += time.perf_counter() - t

    first_shards = [None] * done  # this worker's first shard of each epoch
    os.makedirs(args.out, exist_ok=True)

    if args.kvstore.startswith('dist'):
        with watchdog:
            kv._barrier()  # start the clocks together (MXNet 1.x name)
    start = time.perf_counter()
    for epoch in range(done, args.epochs):
        for step, idx in shards_of_epoch(args, len(y_train), rank, world,
                                         epoch, step, first_shards):
            X = np.array(X_train[idx], ctx=ctx)
            y = np.array(y_train[idx].astype('int32'), ctx=ctx)
            t0, pushed[0] = time.perf_counter(), 0.0
            # The gradient of the sum over the shard, micro-batch by
            # micro-batch when accumulating (nothing is sent meanwhile,
            # unless --naive-accumulate pushes after each micro-batch)
            loss = accumulate_gradients(net, loss_fn, X, y, args.accumulate,
                                        push_now if args.naive_accumulate
                                        else None)
            npx.waitall()
            t1 = time.perf_counter()
            # Push the gradients; the server sums the pushes of all workers
            # and updates with rescale_grad = 1 / B; pull the new weights.
            with watchdog:
                trainer.step(B)
                if args.accumulate > 1:  # grad_req='add': start from zero
                    net.collect_params().zero_grad()
                npx.waitall()
            compute += t1 - t0 - pushed[0]  # early pushes: communication
            communication += time.perf_counter() - t1 + pushed[0]
            if step == 1 and rank == 0:
                write_npz(os.path.join(args.out, 'params_step1.npz'),
                          named_params(net))
        if rank == 0:
            print(_('epoch {epoch}: loss {loss:.3f} (worker 0 shard), '
                    '{seconds:.1f} sec').format(
                epoch=epoch + 1, loss=float(loss.mean()),
                seconds=time.perf_counter() - start), flush=True)
            if args.checkpoint:  # after every epoch
                save_checkpoint(args.checkpoint, net, {
                    'epoch': epoch + 1, 'step': step, 'data_order': order})
    total = time.perf_counter() - start

    mine = {'rank': rank, 'world_size': world, 'host': socket.gethostname(),
            'backend': args.kvstore, 'device': str(ctx), 'steps': step,
            'examples': step * b, 'seconds_compute': compute,
            'seconds_communication': communication, 'seconds_total': total,
            'first_shard_of_epoch': first_shards,
            # What this worker holds: with the optimizer on the servers,
            # its own updater never creates a state
            'parameter_bytes': sum(kvstore_state.state_bytes(p.data())
                                   for p in net.collect_params().values()),
            'optimizer_bytes': sum(kvstore_state.state_bytes(s)
                                   for u in trainer._updaters
                                   for s in u.states.values()),
            'accumulate': args.accumulate, 'pushes': pushes[0],
            'naive_accumulate': args.naive_accumulate}
    if args.kvstore.startswith('dist'):  # each worker counts on its share
        with watchdog:
            correct, counted = evaluate_shared(net, X_test, y_test, ctx, kv)
        shared_acc = correct / counted
    if rank == 0:
        mine['test_acc_rank0_alone'] = evaluate(net, X_test, y_test, ctx)
        mine['test_acc'] = (shared_acc if args.kvstore.startswith('dist')
                            else mine['test_acc_rank0_alone'])
        if args.kvstore.startswith('dist'):
            mine['test_counted'] = counted
        result = {'framework': 'mxnet', 'world_size': world,
                  'backend': args.kvstore, 'epochs': args.epochs,
                  'batch_size': B, 'lr': args.lr, 'seed': args.seed,
                  'num_train': len(y_train), 'num_test': len(y_test),
                  'data': source, 'steps': step, 'examples': step * B,
                  'test_acc': mine['test_acc'], 'seconds_total': total,
                  'restarts': int(os.environ.get('D2LPAR_RESTART_COUNT', 0)),
                  'resumed_after_epoch': done, 'amp': amp_dtype,
                  'test_acc_rank0_alone': mine['test_acc_rank0_alone'],
                  'test_counted': mine.get('test_counted'),
                  'accumulate': args.accumulate,
                  'processes': [mine]}  # the others: OUT/worker{r}.json
        write_json(os.path.join(args.out, 'result.json'), result)
        print(_('test acc {test_acc:.3f} with {world} workers '
                '({backend}), {seconds:.1f} sec').format(
            test_acc=mine['test_acc'], world=world, backend=args.kvstore,
            seconds=total), flush=True)
    write_json(os.path.join(args.out, f'worker{rank}.json'), mine)


if __name__ == '__main__':
    try:
        main()
    except Exception:
        # Leave at once: on a normal exit the KVStore says goodbye to the
        # other workers, and waits for them forever if they are stuck.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
