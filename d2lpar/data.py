"""Fashion-MNIST: the real files when they can be had (cached, downloaded
atomically and checked against their MD5), a synthetic stand-in with the
same shapes otherwise, and minibatches of the arrays in memory.
"""
import functools
import gzip
import hashlib
import os
import struct
import tempfile
import urllib.request

import numpy as np

try:  # file locks: Linux and macOS
    import fcntl
except ImportError:  # Windows: downloads go without the lock
    fcntl = None

from d2lpar.i18n import Message, N_, _, error_message, say_once


class DataError(ValueError):
    """A data file is missing, corrupt or truncated."""


FASHION_MNIST_URL = ('http://fashion-mnist.s3-website.eu-central-1'
                     '.amazonaws.com/')
FASHION_MNIST_FILES = {
    'train': (('train-images-idx3-ubyte.gz',
               '8d4fb7e6c68d591d4c3dfef9ec88bf0d'),
              ('train-labels-idx1-ubyte.gz',
               '25c81989df183df01b3e8a0aad5dffbe')),
    'test': (('t10k-images-idx3-ubyte.gz',
              'bef4ecab320f06d8554ea6380940ec79'),
             ('t10k-labels-idx1-ubyte.gz',
              'bb300cfdad3c16e7a12a480ee83cd310')),
}
DOWNLOAD_TIMEOUT = 5  # seconds; a closed network must not stall a lesson
_offline = False  # set after the first failed download in this process
_source = None  # the source of the arrays the last load returned


def data_dir():
    """Where data sets are cached.

    ``$D2LPAR_DATA`` if set; else ``../data`` as in the d2l book, when it
    can be written; else a per-user cache (``$XDG_CACHE_HOME/d2lpar`` or
    ``~/.cache/d2lpar``), e.g. for a read-only checkout on a shared server.
    """
    chosen = os.environ.get('D2LPAR_DATA')
    if chosen:
        try:
            os.makedirs(chosen, exist_ok=True)
        except OSError as e:
            raise DataError(error_message(
                'D2LPAR_DATA={chosen} cannot be created ({error}): point it '
                'to a folder you can write to.', chosen=chosen,
                error=e)) from e
        return os.path.abspath(chosen)
    candidates = [None, os.path.join('..', 'data'),
                  os.path.join(os.environ.get('XDG_CACHE_HOME')
                               or os.path.expanduser('~/.cache'), 'd2lpar')]
    for d in candidates:
        if not d:
            continue
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return os.path.abspath(d)
    raise DataError(error_message(
        'No writable data directory among {candidates}: set D2LPAR_DATA to '
        'a folder you can write to.', candidates=candidates[1:]))


def md5sum(path):
    h = hashlib.md5()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


def download(url, path, md5, timeout=DOWNLOAD_TIMEOUT):
    """Fetch `url` to `path` atomically and check its MD5.

    The bytes go to a temporary file in the same folder, which is renamed
    over `path` only once its checksum is right, so a killed download
    never leaves a half-written file under the real name. A lock file
    makes concurrent processes wait for each other instead of fetching
    twice. Raises OSError (network) or DataError (bad checksum).
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, '.lock'), 'w') as lock:
        if fcntl is not None:  # released when the file is closed
            fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path) and md5sum(path) == md5:
            return path  # another process finished it while we waited
        fd, tmp = tempfile.mkstemp(dir=folder, prefix='.part-')
        try:
            with os.fdopen(fd, 'wb') as out, \
                    urllib.request.urlopen(url, timeout=timeout) as src:
                for block in iter(lambda: src.read(1 << 20), b''):
                    out.write(block)
            got = md5sum(tmp)
            if got != md5:
                raise DataError(error_message(
                    '{url} arrived with MD5 {got}, expected {md5}: the '
                    'download is damaged or the mirror holds another file.',
                    url=url, got=got, md5=md5))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path


def read_idx(path):
    """Read a gzipped IDX file (the MNIST format) into a NumPy array."""
    try:
        with gzip.open(path, 'rb') as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataError(error_message(
            '{path} is not a readable gzip file ({error}). Delete it and '
            'run again to fetch a fresh copy.', path=path, error=e)) from e
    if len(raw) < 4 or raw[:2] != b'\x00\x00' or raw[2] != 8:
        raise DataError(error_message(
            '{path} is not an IDX file of bytes (bad magic number). Delete '
            'it and run again.', path=path))
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(error_message(
            '{path} is truncated (header). Delete it and run again.',
            path=path))
    shape = struct.unpack(f'>{ndim}I', raw[4:header])
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise DataError(error_message(
            '{path} holds {got} bytes of data, its header promises {size}: '
            'the file is truncated or corrupt. Delete it and run again.',
            path=path, got=len(raw) - header, size=size))
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def fetch_fashion_mnist(split, root=None):
    """Return (images, labels) of the real Fashion-MNIST `split`, from the
    cache or the network; None when offline and the files are missing, or
    when a download arrives damaged (then it says why, once).

    The files come from ``$D2LPAR_FASHION_MNIST_URL`` (a mirror's base URL
    ending in '/', e.g. a local server) if set, else FASHION_MNIST_URL;
    either way they must match the MD5s of FASHION_MNIST_FILES."""
    global _offline
    folder = os.path.join(root or data_dir(), 'FashionMNIST', 'raw')
    base = os.environ.get('D2LPAR_FASHION_MNIST_URL', FASHION_MNIST_URL)
    paths = []
    for name, md5 in FASHION_MNIST_FILES[split]:
        path = os.path.join(folder, name)
        paths.append(path)
        cached = os.path.exists(path)
        if cached and md5sum(path) == md5:
            continue
        if _offline or os.environ.get('D2LPAR_OFFLINE'):
            error = Message('offline')
        else:
            try:
                download(base + name, path, md5)
                continue
            except (OSError, DataError) as e:
                _offline = isinstance(e, OSError)
                error = e
                if isinstance(e, DataError) and not cached:
                    say_once(str(e))  # not "offline?": a damaged file
        if cached:  # (only a file that is there can fail its checksum)
            raise DataError(error_message(
                '{path} is corrupt or truncated (checksum mismatch) and '
                'could not be fetched again ({error}). Delete it, or copy a '
                'good one there, and run again.', path=path, error=error))
        return None
    images, labels = (read_idx(p) for p in paths)
    if len(images) != len(labels):
        raise DataError(error_message(
            '{images_path} has {images} images but {labels_path} has '
            '{labels} labels.', images_path=paths[0], images=len(images),
            labels_path=paths[1], labels=len(labels)))
    return images, labels.astype(np.int64)


def _templates():
    """Ten fixed 28x28 class patterns for the stand-in data set."""
    rng = np.random.default_rng(2024)
    yy, xx = np.mgrid[0:28, 0:28]
    out = np.zeros((10, 28, 28))
    for c in range(10):
        for _blob in range(3):
            cy, cx = rng.uniform(6, 22, 2)
            sy, sx = rng.uniform(2, 7, 2)
            out[c] += np.exp(-((yy - cy) / sy) ** 2 - ((xx - cx) / sx) ** 2)
        out[c] /= out[c].max()
    return out


def stand_in_fashion_mnist(n, seed):
    """A deterministic 28x28, ten-class stand-in for Fashion-MNIST.

    Each class is a fixed pattern of blobs; an example is its class
    pattern shifted by up to two pixels, dimmed, and covered in noise, so
    a small CNN learns it well above chance but not perfectly.
    """
    rng = np.random.default_rng(seed)
    padded = np.pad(_templates(), ((0, 0), (2, 2), (2, 2)))
    y = rng.integers(0, 10, n)
    dy, dx = rng.integers(0, 5, (2, n))
    rows = dy[:, None] + np.arange(28)[None, :]
    cols = dx[:, None] + np.arange(28)[None, :]
    X = padded[y[:, None, None], rows[:, :, None], cols[:, None, :]]
    X = X * rng.uniform(0.5, 1.0, (n, 1, 1))
    X = X + rng.normal(0, 0.35, X.shape)
    X = (np.clip(X, 0, 1) * 255).astype(np.uint8)
    return X, y.astype(np.int64)


class DataIter:
    """Minibatches of in-memory arrays, converted by `convert`.

    No worker processes: the whole set sits in memory as float32, and a
    batch is one NumPy gather, which is fast on a 2-core machine.
    """

    def __init__(self, X, y, batch_size, shuffle, convert, drop_last=False,
                 seed=0):
        if batch_size < 1:
            raise ValueError(error_message(
                'batch_size must be at least 1, got {batch_size!s}.',
                batch_size=batch_size))
        self.X, self.y, self.batch_size = X, y, batch_size
        self.shuffle, self.convert = shuffle, convert
        self.drop_last = drop_last
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        n, b = len(self.y), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def __iter__(self):
        n = len(self.y)
        if self.drop_last and n < self.batch_size:
            raise ValueError(error_message(
                '{n} training examples do not fill one minibatch of '
                '{batch_size}, so training would take no step: keep at '
                'least {batch_size} examples (num_train) or use a smaller '
                'batch_size.', n=n, batch_size=self.batch_size))
        order = self.rng.permutation(n) if self.shuffle else np.arange(n)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            if self.shuffle:
                idx = np.sort(idx)  # sequential gathers are faster
            yield self.convert(self.X[idx], self.y[idx])


def fashion_mnist_arrays(num_train=None, num_test=None):
    """(X_train, y_train, X_test, y_test, source): float32 images of shape
    (n, 1, 28, 28) in [0, 1], int64 labels, and where they came from
    ('Fashion-MNIST' or the stand-in's name, untranslated; `data_source`
    gives it translated). Cached: ``fashion_mnist_arrays.cache_clear()``
    forgets the arrays."""
    global _source
    arrays = _fashion_mnist_arrays(num_train, num_test)
    _source = arrays[4]
    return arrays


def set_source(source):
    """Note where the data of the last load came from ('Fashion-MNIST' or
    the stand-in's untranslated name), when it was loaded elsewhere: in
    the processes of lesson 4, whose summary the kernel reads."""
    global _source
    _source = source


def data_source():
    """The name of the data that the last load of Fashion-MNIST used, in
    the lesson's language: 'Fashion-MNIST', or the stand-in data set when
    the real one could not be had; None before any load. The load may be
    this process's or that of the processes of the last run of
    `train_distributed` (d2lpar.distributed.runs.collect sets it from the run's
    result). A lesson prints it beside every accuracy, which means little
    without it."""
    return None if _source is None else _(_source)


@functools.lru_cache(maxsize=4)
def _fashion_mnist_arrays(num_train, num_test):
    train = fetch_fashion_mnist('train')
    test = fetch_fashion_mnist('test') if train is not None else None
    if train is None or test is None:
        source = N_('the stand-in data set')
        say_once(_('Fashion-MNIST is not in the cache and cannot be '
                   'downloaded (offline?): using a synthetic stand-in with '
                   '10 classes of 28x28 images, made by d2lpar. Accuracies '
                   "differ from the book's."))
        n_tr, n_te = num_train or 60000, num_test or 10000
        train = stand_in_fashion_mnist(n_tr, seed=0)
        test = stand_in_fashion_mnist(n_te, seed=1)
    else:
        source = 'Fashion-MNIST'
    arrays = []
    for (X, y), n in ((train, num_train), (test, num_test)):
        n = len(y) if n is None else min(n, len(y))
        arrays.append((X[:n, None].astype(np.float32) / 255, y[:n]))
    (X_tr, y_tr), (X_te, y_te) = arrays
    say_once(_('Data: {source}, {train} training and {test} test '
               'images.').format(source=_(source), train=len(y_tr),
                                 test=len(y_te)))
    return X_tr, y_tr, X_te, y_te, source


fashion_mnist_arrays.cache_clear = _fashion_mnist_arrays.cache_clear
fashion_mnist_arrays.cache_info = _fashion_mnist_arrays.cache_info
