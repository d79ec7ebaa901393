"""What lesson 4's PyTorch script (ddp_train.py) does beyond its
training loop: checkpoints and restarts (``--checkpoint``,
``--fail-at-step``), mixed precision (``--amp``), sharding with a
sampler, accumulating gradients (``--accumulate``) and evaluating in every
process. Lesson 4 shows some of them (``ddp_train.save_checkpoint``, ...):
ddp_train imports them all.
"""
import contextlib
import os
import re
import socket
import sys
import tempfile

import psutil
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from d2lpar.i18n import N_, _
from d2lpar.distributed.scripts import check_data_order, say_resumed


def make_optimizer(args, params):
    kind = torch.optim.Adam if args.optimizer == 'adam' else torch.optim.SGD
    return kind(params, lr=args.lr)


# --------------------------------------------------------------------------
# Checkpoints and restarts (--checkpoint, --fail-at-step)
# --------------------------------------------------------------------------
CHECKPOINT = 'checkpoint.pt'


def save_checkpoint(path, state):
    # Write state to path so that path always holds a whole checkpoint:
    # the former one or the new one, never half of it
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # A temporary file in the same folder: os.replace then only renames
    fd, tmp = tempfile.mkstemp(dir=folder, prefix='.checkpoint-',
                               suffix='.tmp')
    try:
        with os.fdopen(fd, 'wb') as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # on the disk before it takes the name
        os.replace(tmp, path)  # atomic: a reader sees the old or the new
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def resume(args, model, optimizer, precision, order):
    """Load the checkpoint of ``--checkpoint`` into `model` (DDP),
    `optimizer` and `precision`; return (epochs done, steps done), (0, 0)
    when there is none. Rank 0 reads the file and sends it to the others,
    which may run on machines that do not have it."""
    if not args.checkpoint:
        return 0, 0
    path = os.path.join(args.checkpoint, CHECKPOINT)
    state = [None]
    if dist.get_rank() == 0 and os.path.exists(path):
        state[0] = torch.load(path, map_location='cpu', weights_only=True)
    dist.broadcast_object_list(state)  # rank 0's checkpoint, or None
    state = state[0]
    if state is None:
        return 0, 0
    check_data_order(state, order, path)
    model.module.load_state_dict(state['model'])
    optimizer.load_state_dict(state['optimizer'])
    precision.load_state_dict(state['precision'])
    if dist.get_rank() == 0:
        say_resumed(path, state)
    return state['epoch'], state['step']


def fresh_store(rank, world):
    """The key-value store that torchrun's rendezvous set up, with the
    keys of this attempt under a prefix of their own: after a restart,
    the store may still hold the addresses of the processes that were
    stopped, and a process would try to connect to those."""
    store, _rank, _world = next(dist.rendezvous('env://', rank, world))
    store = dist.PrefixStore(f'attempt{restarts()}/', store)
    share_addresses(store, rank, world)
    return store


def own_address():
    """This machine's IPv4 address on the route to MASTER_ADDR (on one
    machine: loopback), or None where there is no such route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # No packet is sent: connecting a UDP socket picks the route
            s.connect((os.environ.get('MASTER_ADDR', '127.0.0.1'), 9))
            return s.getsockname()[0]
    except OSError:
        return None


def choose_gloo_interface():
    """Unless GLOO_SOCKET_IFNAME names it, the network interface through
    which this machine reaches MASTER_ADDR, for Gloo. Left to itself, Gloo
    takes the address of the machine's hostname, which Debian and Ubuntu
    map to 127.0.1.1: the processes of the other machines would then be
    told to connect to a loopback address, and wait for ever."""
    address = own_address()
    if os.environ.get('GLOO_SOCKET_IFNAME') or address is None:
        return
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address
               for a in addresses):
            os.environ['GLOO_SOCKET_IFNAME'] = name
            return


# --------------------------------------------------------------------------
# Several machines: which one a failure lost
# --------------------------------------------------------------------------
_machines = []  # the address of each rank's machine, rank by rank


def share_addresses(store, rank, world):
    """Write this machine's address in the rendezvous's `store`, and
    read every rank's (for `say_lost_machines`)."""
    store.set(f'address{rank}', own_address() or '?')
    _machines[:] = [store.get(f'address{r}').decode() for r in range(world)]


def answers(address, timeout=3.0):
    """Whether the machine at `address` answers on the network (a refused
    connection is an answer)."""
    try:
        socket.create_connection((address, 9), timeout).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # timed out, unreachable
        return False
    return True


def lost_machines(error):
    """The other machines that the failed collective `error` lost: the
    one whose address Gloo names ('Connection reset by peer'), else those
    that no longer answer (a cut link: Gloo only says it timed out)."""
    mine = own_address()
    others = [a for a in dict.fromkeys(_machines) if a != mine]
    named = [a for a in re.findall(r'\[([0-9A-Fa-f.:]+)\]:\d+', str(error))
             if a in others]
    return list(dict.fromkeys(named)) or [a for a in others
                                          if not answers(a)]


def say_lost_machines(error):
    """Print which machines and ranks the failure `error` of this process
    lost, when the run spans several machines. When the lost machine
    serves the rendezvous and torchrun has no restart left, this
    machine's torchrun can no longer reach it either, and would wait on
    it for many minutes: it is stopped. (With restarts left, torchrun
    waits for the rendezvous to come back, to start the processes again.)"""
    rank = int(os.environ.get('RANK', 0))
    lost = lost_machines(error)
    for address in lost:
        ranks = ', '.join(str(r) for r, a in enumerate(_machines)
                          if a == address)
        sys.stdout.write(_(
            'd2lpar: rank {rank} lost the machine {host} (ranks {ranks}): '
            'its processes ended or the network to it is cut.').format(
                rank=rank, host=address, ranks=ranks) + '\n')
    sys.stdout.flush()
    try:
        agent = psutil.Process().parent()  # torchrun, when it started us
        command = agent.cmdline() if agent is not None else []
    except psutil.Error:
        return
    restarts_left = (int(os.environ.get('TORCHELASTIC_MAX_RESTARTS', 0))
                     - restarts())
    if '--rdzv-endpoint' in command[:-1] and restarts_left <= 0:
        endpoint = command[command.index('--rdzv-endpoint') + 1]
        host = endpoint.rsplit(':', 1)[0]
        try:
            address = socket.gethostbyname(host)
        except OSError:
            address = host
        if address in lost:
            sys.stdout.write(_(
                'd2lpar: torchrun on this machine cannot reach the '
                'rendezvous on {host} either: stopping it.').format(
                    host=host) + '\n')
            sys.stdout.flush()
            agent.kill()


def restarts():
    """How many times torchrun has restarted the processes of this run."""
    return int(os.environ.get('TORCHELASTIC_RESTART_COUNT', 0))


# --------------------------------------------------------------------------
# Mixed precision (--amp)
# --------------------------------------------------------------------------
AMP_HELP = N_('mixed precision: bfloat16 on a CPU, float16 with a gradient '
              'scaler on a GPU')


class Precision:
    """How the training loop computes: in float32, or with ``amp`` in
    mixed precision: the forward pass in bfloat16 on a CPU, in float16 on
    a GPU, where a ``GradScaler`` multiplies the loss before the backward
    pass (small float16 gradients would round to zero) and divides the
    gradients before the update. The parameters stay in float32."""

    def __init__(self, amp, cuda):
        self.device_type = 'cuda' if cuda else 'cpu'
        self.dtype = None
        if amp:
            self.dtype = torch.float16 if cuda else torch.bfloat16
        self.scaler = torch.amp.GradScaler('cuda') if amp and cuda else None
        self.name = str(self.dtype).replace('torch.', '') if amp else None
        self.seen = None  # the dtype of the first output

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def watch(self, output):
        if self.seen is None:
            self.seen = str(output.dtype).replace('torch.', '')
        return output

    def backward(self, loss):
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer):
        if self.scaler is None:
            optimizer.step()
        else:  # skips the step if a gradient overflowed, then adapts
            self.scaler.step(optimizer)
            self.scaler.update()

    def state_dict(self):
        return {} if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state):
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def count_correct(net, X, y, device, batch_size=1024):
    """How many examples of (X, y) `net` classifies correctly."""
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), batch_size):
            X_b = torch.from_numpy(X[i:i + batch_size]).to(device)
            y_b = torch.from_numpy(y[i:i + batch_size]).to(device)
            correct += int((net(X_b).argmax(dim=1) == y_b).sum())
    return correct


def evaluate(net, X, y, device, batch_size=1024):
    """The accuracy on the whole of (X, y), in this process alone."""
    return count_correct(net, X, y, device, batch_size) / len(y)


# --------------------------------------------------------------------------
# Practices of real jobs: sharding with a sampler, accumulating gradients,
# evaluating in every process
# --------------------------------------------------------------------------
def sharded_loader(dataset, batch_size, rank, world, seed=0, num_workers=0,
                   pin_memory=None):
    """(sampler, loader): process `rank` of `world`'s part of `dataset`.

    The `DistributedSampler` shuffles the indices with the seed
    ``seed + epoch`` (the same in every process) and gives this process
    every `world`-th of them, from `rank` on; call
    ``sampler.set_epoch(epoch)`` before each epoch, or every epoch repeats
    the order of the first. `num_workers` processes load the batches
    while this one trains. Pinned (page-locked) memory lets a batch be
    copied to a GPU asynchronously; it is the default only with a GPU,
    since without one it costs a copy and locked memory for nothing."""
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                 shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                        num_workers=num_workers, pin_memory=pin_memory)
    return sampler, loader


def first_indices(num_examples, world, epochs, set_epoch, count=6, seed=0):
    """{rank: [the first `count` indices of each epoch]} that the
    `DistributedSampler` of each of `world` processes gives, with or
    without ``set_epoch`` before each epoch."""
    dataset = TensorDataset(torch.arange(num_examples))
    seen = {}
    for rank in range(world):
        sampler = sharded_loader(dataset, 1, rank, world, seed)[0]
        seen[rank] = []
        for epoch in range(epochs):
            if set_epoch:
                sampler.set_epoch(epoch)
            seen[rank].append(list(sampler)[:count])
    return seen


def accumulate_gradients(model, loss_fn, X, y, micro_steps, precision,
                         naive=False):
    # Backpropagate the mean loss over (X, y) in micro_steps equal
    # micro-batches, whose gradients add up; return the last loss
    chunks = list(zip(X.chunk(micro_steps), y.chunk(micro_steps)))
    for i, (X_m, y_m) in enumerate(chunks):
        last = i == len(chunks) - 1
        # Under DDP, no_sync() keeps every backward pass but the last one
        # from communicating; the last one averages the sums over processes.
        # naive=True leaves no_sync() out: the same step, one allreduce per
        # micro-batch
        quiet = (model.no_sync() if isinstance(
            model, DistributedDataParallel) and not last and not naive
            else contextlib.nullcontext())
        with quiet:
            with precision.autocast():  # float32 unless --amp
                loss = loss_fn(precision.watch(model(X_m)), y_m)
            # Divided by micro_steps: the sum is the mean over the shard
            precision.backward(loss / micro_steps)
    return loss


def evaluate_shared(net, X, y, device, rank, world, batch_size=1024):
    # (correct, total) on the whole of (X, y), counted by all processes:
    # each counts on its share, every world-th example from rank on
    share = slice(rank, None, world)
    counts = torch.tensor([count_correct(net, X[share], y[share], device,
                                         batch_size), len(y[share])],
                          dtype=torch.int64, device=device)
    dist.all_reduce(counts)  # the sums, which every process receives
    correct, total = counts.tolist()
    return correct, total
