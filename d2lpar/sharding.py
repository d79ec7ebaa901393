"""Beyond data parallelism, the framework-free part (lesson 5).

How the collectives cut an array into shards (`shard_bounds`, the cut of
``np.array_split``), the checks of their inputs, the memory that data
parallelism and the three ZeRO stages keep on each device (`zero_memory`,
after Rajbhandari et al., 2020, table 1), what a collective costs on a
link (`collective_seconds`, the alpha-beta model), and the GPipe schedule
with its bubble (`gpipe_schedule`, `bubble_fraction`, `measured_bubble`).
Nothing here imports PyTorch or MXNet.
"""
import numbers

from d2lpar import fonts
from d2lpar.i18n import N_, _, error_message

# Bytes per parameter for (parameters, gradients, optimizer state) with
# Adam: fp32 everywhere (this lesson), or mixed precision as in the ZeRO
# paper (fp16 parameters and gradients; fp32 master copy, momentum and
# variance, 4 + 4 + 4 = 12 bytes of optimizer state)
FP32_ADAM = (4, 4, 8)
MIXED_ADAM = (2, 2, 12)


def shard_bounds(n, k):
    """Where ``np.array_split`` cuts `n` rows into `k` shards: the first
    ``n % k`` shards get one row more. Shard i is rows b[i]:b[i + 1]."""
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + n // k + (1 if i < n % k else 0))
    return bounds


def check_collective(arrays, name, array_type, shape_of, same_rows=True):
    """A clear TypeError or ValueError unless `arrays` is a non-empty list
    (or tuple) of arrays of `array_type`, each with at least one axis, all
    of the same shape (with `same_rows` False: the same shape after the
    first axis, as shards of one array may differ in rows)."""
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(error_message(
            N_('{name} takes a list of arrays, one per device, got {type}.')
            if same_rows else
            N_('{name} takes a list of shards, one per device, got {type}.'),
            name=name, type=type(arrays).__name__))
    if not arrays:
        raise ValueError(error_message(
            N_('{name} got an empty list: it needs one of its arrays per '
               'device.') if same_rows else
            N_('{name} got an empty list: it needs one of its shards per '
               'device.'), name=name))
    for i, a in enumerate(arrays):
        if not isinstance(a, array_type):
            raise TypeError(error_message(
                '{name}: item {i} is a {type}, not an array.',
                name=name, i=i, type=type(a).__name__))
    shapes = [tuple(shape_of(a)) for a in arrays]
    if any(len(s) == 0 for s in shapes):
        raise ValueError(error_message(
            '{name}: every item needs at least one axis to cut along, got '
            'shapes {shapes}.', name=name, shapes=shapes))
    if len({s[0 if same_rows else 1:] for s in shapes}) > 1:
        raise ValueError(error_message(
            N_('{name} needs the same shape on every device, got shapes '
               '{shapes}.') if same_rows else
            N_('{name} needs the same shape after the first axis on every '
               'device, got shapes {shapes}.'), name=name, shapes=shapes))


# --------------------------------------------------------------------------
# Memory per device (ZeRO, Rajbhandari et al., 2020, table 1)
# --------------------------------------------------------------------------
def zero_memory(num_params, num_devices, stage, *, bytes_per=FP32_ADAM):
    """Bytes of model state that each of `num_devices` devices keeps, as a
    dict with 'parameters', 'gradients' and 'optimizer': `stage` 0 is plain
    data parallelism (everything on every device), 1 shards the optimizer
    state, 2 also the gradients, 3 also the parameters. `bytes_per` is
    bytes per parameter for (parameters, gradients, optimizer state)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(error_message(
            'stage is 0 (no sharding), 1, 2 or 3, got {stage!r}.',
            stage=stage))
    if not isinstance(num_devices, numbers.Integral) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    p, g, o = (b * num_params for b in bytes_per)
    k = num_devices
    return {'parameters': p / k if stage >= 3 else p,
            'gradients': g / k if stage >= 2 else g,
            'optimizer': o / k if stage >= 1 else o}


def plot_memory(num_params, device_counts, *, measured=None, title=None):
    """Model state per device against the number of devices, for data
    parallelism and the three ZeRO stages (lines: `zero_memory`); the
    dict `measured` maps (stage, k) to bytes counted on real devices
    (markers)."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()
    ax = plt.subplots(figsize=(5, 3.2))[1]
    names = [_('data parallel'), 'ZeRO-1', 'ZeRO-2', 'ZeRO-3']
    for stage, name in enumerate(names):
        ys = [sum(zero_memory(num_params, k, stage).values()) / 1e6
              for k in device_counts]
        line, = ax.plot(device_counts, ys, label=name)
        points = [(k, b / 1e6) for (s, k), b in (measured or {}).items()
                  if s == stage]
        if points:
            ax.plot(*zip(*points), 'o', color=line.get_color())
    ax.set_xlabel(_('number of devices'))
    ax.set_ylabel(_('MB per device'))
    ax.set_xticks(device_counts)
    ax.legend(fontsize=8)
    ax.set_title(title or _('model state per device (lines: formula, '
                            'dots: counted)'), fontsize=9)
    plt.tight_layout()
    plt.show()
    return ax


# --------------------------------------------------------------------------
# What a collective costs on a link (the alpha-beta model of lesson 2)
# --------------------------------------------------------------------------
def collective_seconds(kind, num_bytes, num_devices, *, bandwidth,
                       latency=0.0):
    """Seconds for a collective of `num_bytes` over `num_devices` devices
    whose links carry `bandwidth` bytes/s each way, with `latency` seconds
    per message. A ring 'reduce_scatter' or 'all_gather' of an array of
    `num_bytes` (the whole array) takes k-1 steps of N/k bytes, an
    'allreduce' both: 2(k-1) steps. An 'all_to_all' (expert parallelism)
    sends out (k-1)/k of the `num_bytes` that each device holds, with the
    pairwise algorithm: at step i = 1 .. k-1, device d sends its block of
    N/k bytes for device (d + i) mod k and receives one from device
    (d - i) mod k, so it takes (k-1) latency + (k-1)/k N / bandwidth."""
    steps = {'reduce_scatter': 1, 'all_gather': 1, 'allreduce': 2,
             'all_to_all': 1}
    if kind not in steps:
        raise ValueError(error_message(
            "kind is 'reduce_scatter', 'all_gather', 'allreduce' or "
            "'all_to_all', got {kind!r}.", kind=kind))
    if not isinstance(num_devices, numbers.Integral) or num_devices < 1:
        raise ValueError(error_message(
            'num_devices must be an int >= 1, got {num_devices!r}.',
            num_devices=num_devices))
    if not isinstance(num_bytes, numbers.Real) or num_bytes < 0:
        raise ValueError(error_message(
            'num_bytes must be a number >= 0, got {num_bytes!r}.',
            num_bytes=num_bytes))
    k = num_devices
    return steps[kind] * (k - 1) * (latency + num_bytes / k / bandwidth)


# --------------------------------------------------------------------------
# Pipeline parallelism: GPipe (Huang et al., 2019)
# --------------------------------------------------------------------------
def gpipe_schedule(num_stages, num_microbatches):
    """The GPipe schedule as a list of clock ticks; each tick is a list of
    (stage, 'F' or 'B', micro-batch) that run at the same time. All
    forward passes come first, micro-batch j on stage s at tick j + s;
    then the backward passes, from the last stage back."""
    k, m = _check_pipeline(num_stages, num_microbatches)
    ticks = []
    for t in range(m + k - 1):
        ticks.append([(s, 'F', t - s) for s in range(k) if 0 <= t - s < m])
    for t in range(m + k - 1):
        ticks.append([(s, 'B', t - (k - 1 - s)) for s in reversed(range(k))
                      if 0 <= t - (k - 1 - s) < m])
    return ticks


def _check_pipeline(k, m):
    if not (isinstance(k, int) and isinstance(m, int)) or k < 1 or m < 1:
        raise ValueError(error_message(
            'num_stages and num_microbatches must be >= 1, got {k!r} and '
            '{m!r}.', k=k, m=m))
    return k, m


def bubble_fraction(num_stages, num_microbatches, num_chunks=1):
    """The share of time a stage of the GPipe schedule sits idle, when all
    stages take the same time: (k - 1) / (m + k - 1); with `num_chunks`
    v model chunks per device (the interleaved schedule):
    (k - 1) / (v * m + k - 1)."""
    k, m = _check_pipeline(num_stages, num_microbatches)
    v = _check_chunks(num_chunks)
    return (k - 1) / (v * m + k - 1)


def _check_chunks(v):
    if not isinstance(v, int) or v < 1:
        raise ValueError(error_message(
            'num_chunks must be >= 1, got {v!r}.', v=v))
    return v


def interleaved_schedule(num_stages, num_microbatches, num_chunks):
    """The interleaved schedule (Narayanan et al., 2021), all forward
    passes first, as a list of clock ticks. The model is cut into k * v
    chunks, chunk c on device c % k: each device holds v chunks, each
    1/v of a stage, which take one tick each. A device takes the
    micro-batches k at a time through its first chunk, then through its
    next one, and so on (the backward passes in the reverse order of the
    chunks). At each tick a device does the next pass on its list if the
    pass it needs is done, and waits otherwise. Each tick is a list of
    (device, 'F' or 'B', micro-batch, chunk); v = 1 is GPipe."""
    k, m = _check_pipeline(num_stages, num_microbatches)
    v = _check_chunks(num_chunks)
    if v > 1 and m % k:
        raise ValueError(error_message(
            'The interleaved schedule takes the micro-batches {k} at a '
            'time: pass a multiple of {k}, not {m}.', k=k, m=m))
    last = k * v - 1

    def passes(d, kind):  # what device d does, in order
        chunks = range(v) if kind == 'F' else range(v - 1, -1, -1)
        group = k if v > 1 else m
        return [(kind, j, c * k + d) for first in range(0, m, group)
                for c in chunks for j in range(first, first + group)]

    def needs(kind, j, c):  # the pass whose result this one takes
        if kind == 'F':
            return ('F', j, c - 1) if c > 0 else None
        return ('B', j, c + 1) if c < last else ('F', j, last)

    todo = [passes(d, 'F') + passes(d, 'B') for d in range(k)]
    done, ticks = {}, []  # done: pass -> the tick it ran at
    while any(todo):
        t = len(ticks)
        tick = []
        for d in range(k):
            if todo[d]:
                kind, j, c = todo[d][0]
                before = needs(kind, j, c)
                if before is None or done.get(before, t) < t:
                    tick.append((d, kind, j, c))
                    todo[d].pop(0)
        for d, kind, j, c in tick:
            done[kind, j, c] = t
        ticks.append(tick)
    return ticks


def measured_bubble(events, rows):
    """The idle share of the `rows` of a timeline's `events`: 1 - (time
    they were busy) / (number of rows * time from the first start to the
    last end)."""
    mine = [e for e in events if e.row in rows]
    if not mine:
        raise ValueError(error_message('no event on the rows {rows}.',
                                       rows=rows))
    span = max(e.end for e in mine) - min(e.start for e in mine)
    busy = sum(e.end - e.start for e in mine)
    return 1 - busy / (len(rows) * span)
