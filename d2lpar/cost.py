"""What an allreduce costs: the alpha-beta model and a table of real links.

Sending a message of n bytes over a link takes ``alpha + n / beta``
seconds: `alpha`, the latency, is paid for every message however small,
and `beta` is the bandwidth of one direction of the link. From that:

- ring allreduce of N bytes on k devices: 2(k-1) steps, in each of which
  every device sends N/k bytes to its neighbour, all links at once:
  ``2(k-1) alpha + 2(k-1)/k * N / beta``;
- naive allreduce (everything through device 0, the lesson's first
  version): device 0 receives k-1 messages of N bytes over its one link,
  then sends k-1 back, one after another: ``2(k-1) (alpha + N / beta)``.

Framework-free: ``d2lpar.api`` imports these names, and both
backends re-export them from there.
"""
import collections
import math
import numbers
import re
import shutil
import subprocess

from d2lpar import fonts
from d2lpar.i18n import _, error_message, number

Link = collections.namedtuple('Link', 'label alpha beta')
Link.__doc__ = ('A link between devices: a label, the latency `alpha` in '
                'seconds per message and the bandwidth `beta` in bytes per '
                'second, one direction.')

# alpha: the latency per step of a ring that NCCL's own cost model uses
# (NVIDIA/nccl, src/graph/tuning.cc, table hwLat, Ring algorithm, Simple
# protocol): 3.4 us over NVLink, 5.7 us over PCIe, 14 us over a network;
# NCCL predicts a ring allreduce to take a fixed 8.4 us plus 2(k-1) of
# these, as below (its low-latency LL protocol gets 0.6, 1.0 and 2.7 us, at
# a quarter of the bandwidth). NCCL uses its network figure for every
# network, InfiniBand or Ethernet alike; TCP through the kernel's sockets
# usually adds more, so the Ethernet rows are optimistic for small messages.
# beta: the nominal rate of one direction (every link here is full duplex);
# real transfers reach somewhat less.
LINKS = {
    # PCI-SIG, PCI Express Base Specification 3.0 (2010): 8 GT/s per lane,
    # 128b/130b encoding: 16 lanes * 8e9 * 128/130 / 8 bits = 15.75 GB/s
    'pcie3': Link('PCIe 3.0 x16', 5.7e-6, 15.75e9),
    # PCI Express 4.0 (2017): 16 GT/s per lane, 31.5 GB/s for 16 lanes
    'pcie4': Link('PCIe 4.0 x16', 5.7e-6, 31.5e9),
    # PCI Express 5.0 (2019): 32 GT/s per lane, 63 GB/s for 16 lanes
    'pcie5': Link('PCIe 5.0 x16', 5.7e-6, 63e9),
    # NVIDIA A100 Tensor Core GPU Architecture (whitepaper, 2020): 12
    # third-generation NVLinks, 600 GB/s in both directions together
    'nvlink3': Link('NVLink 3 (A100)', 3.4e-6, 300e9),
    # NVIDIA H100 Tensor Core GPU Architecture (whitepaper, 2022): 18
    # fourth-generation NVLinks, 900 GB/s in both directions together
    'nvlink4': Link('NVLink 4 (H100)', 3.4e-6, 450e9),
    # InfiniBand Trade Association, InfiniBand roadmap: EDR 100 Gb/s, HDR
    # 200 Gb/s and NDR 400 Gb/s per 4x port; 8 bits per byte
    'ib100': Link('InfiniBand 100 Gb/s', 14e-6, 12.5e9),
    'ib200': Link('InfiniBand 200 Gb/s', 14e-6, 25e9),
    'ib400': Link('InfiniBand 400 Gb/s', 14e-6, 50e9),
    # IEEE 802.3ae (10 Gb/s Ethernet, 2002) and IEEE 802.3ba (100 Gb/s,
    # 2010)
    'eth10': Link('Ethernet 10 Gb/s', 14e-6, 1.25e9),
    'eth100': Link('Ethernet 100 Gb/s', 14e-6, 12.5e9),
}
ALGORITHMS = ('ring', 'naive')


def as_link(link):
    """`link` as a `Link`: a key of `LINKS`, or a `Link` itself."""
    if isinstance(link, Link):
        alpha, beta = link.alpha, link.beta
        if not (_real(alpha) and alpha >= 0 and _real(beta) and beta > 0):
            raise ValueError(error_message(
                'A Link needs alpha >= 0 (seconds) and beta > 0 (bytes per '
                'second), got {link!r}.', link=link))
        return link
    if isinstance(link, str) and link in LINKS:
        return LINKS[link]
    raise ValueError(error_message(
        'Unknown link {link!r}: use one of {links}, or a d2l.Link(label, '
        'alpha, beta).', link=link, links=', '.join(LINKS)))


def _real(x):
    return (isinstance(x, numbers.Real) and not isinstance(x, bool)
            and math.isfinite(x))


def allreduce_time(n_bytes, k, link, *, algorithm='ring'):
    """Seconds that an allreduce of `n_bytes` on each of `k` devices takes
    over `link` (a key of `LINKS` or a `Link`) in the alpha-beta model:
    ``algorithm='ring'``: 2(k-1) alpha + 2(k-1)/k * n_bytes / beta;
    ``algorithm='naive'`` (all through one device's link):
    2(k-1) (alpha + n_bytes / beta). One device needs no communication: 0.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(error_message(
            'k, the number of devices, must be an int >= 1, got {k!r}.',
            k=k))
    if not _real(n_bytes) or n_bytes < 0:
        raise ValueError(error_message(
            'n_bytes must be a finite number of bytes >= 0, got '
            '{n_bytes!r}.', n_bytes=n_bytes))
    link = as_link(link)
    if algorithm == 'ring':
        return 2 * (k - 1) * link.alpha + 2 * (k - 1) / k * n_bytes / link.beta
    if algorithm == 'naive':
        return 2 * (k - 1) * (link.alpha + n_bytes / link.beta)
    raise ValueError(error_message(
        'Unknown algorithm {algorithm!r}: use one of {algorithms}.',
        algorithm=algorithm,
        algorithms=', '.join(repr(a) for a in ALGORITHMS)))


def format_seconds(t):
    """`t` seconds with three significant digits, in us, ms or s, with the
    decimal sign of the lesson's language (as `d2l.fmt` writes the other
    numbers of a lesson's tables): 5.77 ms, 5,77 ms in French."""
    if t < 0.9995e-3:
        return number(t * 1e6, '.3g') + ' µs'
    if t < 0.9995:
        return number(t * 1e3, '.3g') + ' ms'
    return number(t, '.3g') + ' s'


# --------------------------------------------------------------------------
# Which link joins this machine's GPUs
# --------------------------------------------------------------------------
# The chips whose NVLink generation the table has, as nvidia-smi names
# them ('NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3')
NVLINK_GENERATIONS = {'A100': 'nvlink3', 'A800': 'nvlink3',
                      'H100': 'nvlink4', 'H200': 'nvlink4',
                      'H800': 'nvlink4', 'H20': 'nvlink4'}


def link_from_nvidia_smi(topology, query):
    """The key of `LINKS` for the link between GPU 0 and GPU 1, from the
    output of ``nvidia-smi topo -m`` (`topology`) and of ``nvidia-smi
    --query-gpu=name,pcie.link.gen.max --format=csv,noheader`` (`query`);
    None when there are fewer than two GPUs or the table has no such
    link (an NVLink of another generation, an unknown PCIe generation)."""
    rows = [line.split() for line in topology.splitlines() if line.strip()]
    header = next((r for r in rows if 'GPU1' in r), None)
    # The row of GPU 0 (the header, whose first name is GPU0 too, excepted)
    gpu0 = next((r for r in rows if r[0] == 'GPU0' and r is not header),
                None)
    if header is None or gpu0 is None:
        return None
    # The header has no cell above the row names: column j is cell j + 1
    column = header.index('GPU1') + 1
    if column >= len(gpu0):
        return None
    lines = [line.split(',') for line in query.splitlines() if line.strip()]
    if not lines:
        return None
    name = lines[0][0]
    if gpu0[column].startswith('NV'):  # NV4, NV12, NV18: NVLinks
        return next((link for chip, link in NVLINK_GENERATIONS.items()
                     if re.search(rf'\b{chip}\b', name)), None)
    generation = lines[0][1].strip() if len(lines[0]) > 1 else ''
    return {'3': 'pcie3', '4': 'pcie4', '5': 'pcie5'}.get(generation)


def gpu_link():
    """The key of `LINKS` for the link between this machine's GPU 0 and
    GPU 1, as ``nvidia-smi`` reports it (NVLink: its generation from the
    GPU's name; otherwise PCIe of the generation the GPU and the board
    both support, x16 assumed); None without two GPUs or ``nvidia-smi``,
    or for a link the table does not have."""
    smi = shutil.which('nvidia-smi')
    if smi is None:
        return None
    try:
        topology = subprocess.run([smi, 'topo', '-m'], capture_output=True,
                                  text=True, timeout=30, check=True).stdout
        query = subprocess.run(
            [smi, '--query-gpu=name,pcie.link.gen.max',
             '--format=csv,noheader'], capture_output=True, text=True,
            timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return link_from_nvidia_smi(topology, query)


# --------------------------------------------------------------------------
# The model next to what this machine measured
# --------------------------------------------------------------------------
def plot_cost_model(rows, *, k=None, links=None, title=None):
    """The ring allreduce time of the alpha-beta model on each of `links`
    (default: all of `LINKS`) against the message size, for `k` devices
    (default: the most devices in `rows` that were GPUs, else the most
    devices), with the times this machine measured (`rows` from
    `measure_allreduce`, at that k) as points."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    if k is None:  # CPU stand-ins are not set against GPU links if GPUs ran
        on_gpus = [r['devices'] for r in rows if r.get('on') == 'gpu']
        k = max(on_gpus or [r['devices'] for r in rows])
    mine = [r for r in rows if r['devices'] == k]
    if not mine:
        raise ValueError(error_message(
            'rows has no measurement on {k!s} devices; it has {counts!s}.',
            k=k, counts=sorted({r['devices'] for r in rows})))
    links = list(LINKS) if links is None else links
    low = min(r['bytes'] for r in mine)
    high = max(max(r['bytes'] for r in mine), 1 << 30)
    sizes = [low * (high / low) ** (i / 40) for i in range(41)]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for link in links:
        ax.loglog(sizes, [allreduce_time(n, k, link) for n in sizes], '-',
                  lw=1.2, label=as_link(link).label)
    for algo, marker in zip(dict.fromkeys(r['algorithm'] for r in mine),
                            'os^vD'):
        points = [r for r in mine if r['algorithm'] == algo]
        ax.loglog([r['bytes'] for r in points],
                  [r['seconds'] for r in points], marker, color='black',
                  label=_('measured here: {algorithm}').format(
                      algorithm=algo))
    ax.set_xlabel(_('bytes per device'))
    ax.set_ylabel(_('seconds'))
    ax.set_title(title or _('allreduce on {k} devices: ring model and this '
                            'machine').format(k=k), fontsize=10)
    ax.legend(fontsize=7, loc='center left', bbox_to_anchor=(1.02, 0.5))
    plt.tight_layout()
    plt.show()


# --------------------------------------------------------------------------
# A training step: compute against communication
# --------------------------------------------------------------------------
Gpu = collections.namedtuple('Gpu', 'label bf16 fp32')
Gpu.__doc__ = ('A GPU as its spec sheet gives it: a label and its dense '
               'rates in FLOP/s, `bf16` on its tensor cores and `fp32` '
               'without them.')

# Dense rates (the data sheets also print rates "with sparsity", twice
# these, which training does not reach):
GPUS = {
    # NVIDIA L4 Tensor Core GPU datasheet (2023), a PCIe card: FP32 30.3
    # TFLOPS, BF16 242 TFLOPS with sparsity, so 121 dense
    'L4': Gpu('NVIDIA L4', 121e12, 30.3e12),
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM: FP32 19.5 TFLOPS,
    # BF16 312 TFLOPS (624 with sparsity)
    'A100': Gpu('NVIDIA A100 SXM', 312e12, 19.5e12),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), SXM: FP32 67 TFLOPS,
    # BF16 1,979 TFLOPS with sparsity, so 989 dense
    'H100': Gpu('NVIDIA H100 SXM', 989e12, 67e12),
}
# FLOPs of one example's forward and backward pass per parameter: a
# weight used once per example costs a multiply and an add forward (2),
# and twice that backward, for the gradients of the input and of the
# weight (4). A convolution uses each weight at every position, so it
# costs more than 6 per parameter.
FLOPS_PER_PARAM = 6


def _check_positive(name, value):
    if not _real(value) or value <= 0:
        raise ValueError(error_message(
            '{name} must be a finite number > 0, got {value!r}.',
            name=name, value=value))


def compute_time(num_params, batch_size, flops_per_second):
    """Seconds of the forward and backward pass of `batch_size` examples
    through a model of `num_params` parameters on a device that computes
    `flops_per_second`: 6 * num_params * batch_size / flops_per_second."""
    _check_positive('num_params', num_params)
    _check_positive('batch_size', batch_size)
    _check_positive('flops_per_second', flops_per_second)
    return FLOPS_PER_PARAM * num_params * batch_size / flops_per_second


def step_time(num_params, batch_size, link, *, k, flops_per_second,
              bytes_per_param=4, overlap=True):
    """Seconds of one step of data parallelism on `k` devices joined by
    `link`, each computing `batch_size` examples at `flops_per_second`:
    its compute (`compute_time`) and the ring allreduce of the gradient
    (`bytes_per_param` bytes per parameter, `allreduce_time`), at the same
    time (``overlap=True``: the longer of the two) or one after the other
    (``overlap=False``: their sum)."""
    _check_positive('bytes_per_param', bytes_per_param)
    compute = compute_time(num_params, batch_size, flops_per_second)
    communicate = allreduce_time(bytes_per_param * num_params, k, link)
    if overlap:
        return max(compute, communicate)
    return compute + communicate


def critical_batch(flops_per_second, link, *, k, bytes_per_param=4):
    """The per-device batch above which a step of data parallelism on `k`
    devices computes longer than its allreduce sends: compute
    6 P b / C against the bandwidth term 2(k-1)/k * q P / beta of the
    ring (q = `bytes_per_param`, latency left out), equal when
    b = C / beta * 2(k-1)/k * q / 6. The model's size P drops out."""
    _check_positive('flops_per_second', flops_per_second)
    _check_positive('bytes_per_param', bytes_per_param)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(error_message(
            'k, the number of devices, must be an int >= 1, got {k!r}.',
            k=k))
    link = as_link(link)
    return (flops_per_second / link.beta
            * 2 * (k - 1) / k * bytes_per_param / FLOPS_PER_PARAM)


def plot_step_time(num_params, flops_per_second, *, k, measured=None,
                   bytes_per_param=4, links=None):
    """Seconds per step against the per-device batch (1 to 4096), for a
    model of `num_params` parameters on `k` devices that compute
    `flops_per_second` each: the compute alone (dashed), and on each of
    `links` (default: all of `LINKS`) the step with the allreduce
    overlapped (solid line) and not overlapped (dotted). `measured`, a
    pair (batch, seconds), is drawn as a point."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    links = list(LINKS) if links is None else links
    batches = [2 ** (i / 4) for i in range(49)]  # 1 to 4096
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for link in links:
        overlapped = [step_time(num_params, b, link, k=k,
                                flops_per_second=flops_per_second,
                                bytes_per_param=bytes_per_param)
                      for b in batches]
        one_after_other = [step_time(num_params, b, link, k=k,
                                     flops_per_second=flops_per_second,
                                     bytes_per_param=bytes_per_param,
                                     overlap=False) for b in batches]
        line, = ax.loglog(batches, overlapped, '-', lw=1.2,
                          label=as_link(link).label)
        ax.loglog(batches, one_after_other, ':', lw=1,
                  color=line.get_color())
    ax.loglog(batches, [compute_time(num_params, b, flops_per_second)
                        for b in batches], '--', color='black', lw=1,
              label=_('compute alone'))
    if measured is not None:
        batch, seconds = measured
        ax.loglog([batch], [seconds], 'o', color='black',
                  label=_('measured here'))
    ax.set_xlabel(_('examples per device'))
    ax.set_ylabel(_('seconds per step'))
    ax.set_title(_('a step on {k} devices: overlapped (solid), one after '
                   'the other (dotted)').format(k=k), fontsize=10)
    ax.legend(fontsize=7, loc='center left', bbox_to_anchor=(1.02, 0.5))
    plt.tight_layout()
    plt.show()
