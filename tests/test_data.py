"""Fashion-MNIST: IDX files, the checked and atomic download, the cache
folder, the stand-in data set, and the loaders of both backends.

The download tests serve small IDX files of our own, from a file:// URL or
from a local HTTP server that counts the requests, so nothing goes to the
network. Tests of the framework-free helpers in
`d2lpar.data` that no backend wraps (read_idx, download, the stand-in
generator) run once; everything a backend exposes runs on both.
"""
import collections
import gzip
import hashlib
import http.server
import json
import os
import re
import select
import stat
import struct
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

from d2lpar import data
from d2lpar.data import DataError

NAMES = {'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
         'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}
NOTICE = 'cannot be downloaded'


# --------------------------------------------------------------------------
# IDX files
# --------------------------------------------------------------------------
def idx_bytes(array):
    """The IDX encoding of a uint8 array: magic 0x0000 08 <ndim>, the dims
    as big-endian uint32, then the bytes."""
    array = np.asarray(array, np.uint8)
    return (bytes([0, 0, 8, array.ndim])
            + struct.pack(f'>{array.ndim}I', *array.shape)
            + array.tobytes())


def write_gz(path, raw):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw, mtime=0))
    return path


def md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def images_and_labels(n, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
            rng.integers(0, 10, n).astype(np.uint8))


def test_read_idx_of_a_file_written_by_hand(tmp_path):
    """The IDX layout spelt out byte by byte, not by `idx_bytes`: magic
    0x00000803 (unsigned bytes, 3 dims), dims 2, 3, 4 big-endian, then the
    bytes in C order."""
    raw = (b'\x00\x00\x08\x03' + b'\x00\x00\x00\x02' + b'\x00\x00\x00\x03'
           + b'\x00\x00\x00\x04' + bytes(range(24)))
    got = data.read_idx(write_gz(tmp_path / 'hand.gz', raw))
    assert got.dtype == np.uint8 and got.shape == (2, 3, 4)
    assert got[1, 0, 2] == 1 * 12 + 0 * 4 + 2
    np.testing.assert_array_equal(got.ravel(), np.arange(24))
    assert idx_bytes(got) == raw  # and the helper the other tests use agrees


def test_read_idx_reads_back_exactly(tmp_path):
    images, labels = images_and_labels(5, 0)
    got_images = data.read_idx(write_gz(tmp_path / 'i.gz',
                                           idx_bytes(images)))
    got_labels = data.read_idx(write_gz(tmp_path / 'l.gz',
                                           idx_bytes(labels)))
    assert got_images.dtype == got_labels.dtype == np.uint8
    assert got_images.shape == (5, 28, 28) and got_labels.shape == (5,)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_read_idx_of_an_empty_set(tmp_path):
    got = data.read_idx(write_gz(tmp_path / 'e.gz',
                                    idx_bytes(np.zeros((0, 28, 28)))))
    assert got.shape == (0, 28, 28)


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def _assert_says_delete(error, path):
    message = str(error.value)
    assert str(path) in message
    assert 'Delete it' in message


def test_read_idx_of_a_truncated_gzip_file(tmp_path):
    images, _ = images_and_labels(20, 0)
    path = write_gz(tmp_path / 'cut.gz', idx_bytes(images))
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    with pytest.raises(DataError, match='not a readable gzip file') as error:
        data.read_idx(path)
    _assert_says_delete(error, path)


def test_read_idx_of_truncated_data(tmp_path):
    images, _ = images_and_labels(4, 0)
    path = write_gz(tmp_path / 'short.gz', idx_bytes(images)[:-100])
    with pytest.raises(DataError, match=r'holds 3036 bytes of data, its '
                       r'header promises 3136.*truncated') as error:
        data.read_idx(path)
    _assert_says_delete(error, path)


def test_read_idx_of_a_truncated_header(tmp_path):
    path = write_gz(tmp_path / 'head.gz', bytes([0, 0, 8, 3, 0, 0, 0, 4]))
    with pytest.raises(DataError, match=r'truncated \(header\)') as error:
        data.read_idx(path)
    _assert_says_delete(error, path)


@pytest.mark.parametrize('magic', [b'\x00\x00\x09\x03', b'\x01\x00\x08\x03',
                                   b'PK\x03\x04', b''])
def test_read_idx_with_a_bad_magic_number(tmp_path, magic):
    path = write_gz(tmp_path / 'magic.gz', magic + b'\x00' * 12)
    with pytest.raises(DataError, match='bad magic number') as error:
        data.read_idx(path)
    _assert_says_delete(error, path)


def test_read_idx_of_a_file_that_is_not_gzip(tmp_path):
    images, _ = images_and_labels(2, 0)
    path = tmp_path / 'plain.gz'
    path.write_bytes(idx_bytes(images))  # IDX, but not compressed
    with pytest.raises(DataError, match='not a readable gzip file') as error:
        data.read_idx(path)
    _assert_says_delete(error, path)


# --------------------------------------------------------------------------
# Downloading into the cache, from a file:// mirror
# --------------------------------------------------------------------------
@pytest.fixture
def mirror(tmp_path):
    """A folder of small Fashion-MNIST files: 40 training, 15 test images.
    Returns (url, files like FASHION_MNIST_FILES, arrays by split)."""
    folder = tmp_path / 'mirror'
    files, arrays = {}, {}
    for split, n, seed in (('train', 40, 1), ('test', 15, 2)):
        images, labels = images_and_labels(n, seed)
        arrays[split] = (images, labels)
        entries = []
        for name, array in zip(NAMES[split], (images, labels)):
            entries.append((name, md5(write_gz(folder / name,
                                               idx_bytes(array)))))
        files[split] = tuple(entries)
    return folder.as_uri() + '/', files, arrays


@pytest.fixture
def online(fresh_data, monkeypatch, mirror, tmp_path):
    """Downloads allowed, from `mirror`, into an empty cache."""
    url, files, arrays = mirror
    cache = tmp_path / 'cache'
    monkeypatch.delenv('D2LPAR_OFFLINE', raising=False)
    monkeypatch.setenv('D2LPAR_DATA', str(cache))
    monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL', url)
    monkeypatch.setattr(data, 'FASHION_MNIST_FILES', files)
    return cache / 'FashionMNIST' / 'raw', files, arrays


def _loaded(backend, batch_size=8, num_train=None, num_test=None):
    """All batches of both iterators, as NumPy arrays."""
    train_iter, test_iter = backend.load_data_fashion_mnist(
        batch_size, num_train, num_test)
    return ([(backend.numpy(X), backend.numpy(y)) for X, y in train_iter],
            [(backend.numpy(X), backend.numpy(y)) for X, y in test_iter])


def _concat(batches):
    return (np.concatenate([X for X, _ in batches]),
            np.concatenate([y for _, y in batches]))


def _leftovers(folder):
    return sorted(p for p in os.listdir(folder) if p.startswith('.part-'))


def test_download_of_good_files(backend, online, capsys):
    raw, files, arrays = online
    train, test = _loaded(backend)
    out = capsys.readouterr().out
    assert 'Data: Fashion-MNIST, 40 training and 15 test images.' in out
    assert NOTICE not in out
    for split in files:
        for name, md5sum in files[split]:
            assert md5(raw / name) == md5sum
    assert _leftovers(raw) == []
    # The test iterator gives the files' images, scaled to [0, 1], in order
    X, y = _concat(test)
    images, labels = arrays['test']
    np.testing.assert_array_equal(X, images[:, None].astype(np.float32)
                                  / 255)
    np.testing.assert_array_equal(y, labels)
    # The training iterator: 40 // 8 batches of distinct training examples
    assert len(train) == 5
    images, labels = arrays['train']
    label_of = {x.tobytes(): label for x, label in
                zip(images[:, None].astype(np.float32) / 255, labels)}
    X, y = _concat(train)
    assert len({x.tobytes() for x in X}) == 40
    assert [label_of[x.tobytes()] for x in X] == y.tolist()
    # Loaded again, nothing is downloaded again
    calls = []
    data.fashion_mnist_arrays.cache_clear()
    original = data.download
    with pytest.MonkeyPatch.context() as m:
        m.setattr(data, 'download',
                  lambda *a, **k: calls.append(a) or original(*a, **k))
        _loaded(backend)
    assert calls == []


def test_a_corrupt_cached_file_is_fetched_again(backend, online, capsys):
    raw, files, arrays = online
    name, md5sum = files['train'][0]
    raw.mkdir(parents=True)
    (raw / name).write_bytes(b'not the file you are looking for')
    _, test = _loaded(backend, num_train=16)
    assert md5(raw / name) == md5sum
    assert 'Data: Fashion-MNIST, 16 training and 15 test images.' in \
        capsys.readouterr().out
    np.testing.assert_array_equal(_concat(test)[1], arrays['test'][1])


def test_data_source_names_the_data_of_the_last_load(backend, online,
                                                      monkeypatch):
    """What the lessons print beside every checked accuracy: the data of
    the last load, in the lesson's language, also when the arrays come
    from the cache of earlier loads."""
    monkeypatch.setattr(data, '_source', None)
    assert backend.data_source() is None
    _loaded(backend, num_train=16)
    assert backend.data_source() == 'Fashion-MNIST'
    # The mirror is gone: a new load falls back to the stand-in...
    monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL', 'file:///nonexistent/')
    monkeypatch.setenv('D2LPAR_DATA', str(online[0].parent / 'elsewhere'))
    _loaded(backend, num_train=17)
    assert backend.data_source() == 'the stand-in data set'
    backend.use_language('fr')
    assert backend.data_source() == 'le jeu de données de substitution'
    backend.use_language('en')
    # ...and the earlier load, served by the cache, was the real data
    _loaded(backend, num_train=16)
    assert backend.data_source() == 'Fashion-MNIST'


def test_nbval_reads_every_name_of_the_data_alike(monkeypatch):
    """A checked line names its data (`data_source`): nbval's substitutions
    (tests/nbval_sanitize.cfg) make the stand-in's name, in every
    language, and Fashion-MNIST's compare equal, so that a lesson run on
    the real data still passes against the outputs committed from the
    stand-in."""
    import configparser
    import pathlib
    from d2lpar import i18n
    config = configparser.ConfigParser(interpolation=None)
    config.read(pathlib.Path(__file__).parent / 'nbval_sanitize.cfg',
                encoding='utf-8')

    def sanitize(text):
        for section in config.sections():
            text = re.sub(config[section]['regex'],
                          config[section].get('replace', ''), text)
        return text

    monkeypatch.setattr(data, '_source', 'Fashion-MNIST')
    real = sanitize(f'97.9% on {data.data_source()}, within 2 points: True')
    monkeypatch.setattr(data, '_source', 'the stand-in data set')
    for code in i18n.LANGUAGES:
        i18n.use_language(code)
        line = f'97.9% on {data.data_source()}, within 2 points: True'
        assert sanitize(line) == real, code


def test_a_download_with_the_wrong_md5_is_not_kept(online, tmp_path):
    raw, files, _ = online
    name, _ = files['train'][0]
    url = os.environ['D2LPAR_FASHION_MNIST_URL'] + name
    with pytest.raises(DataError, match=r'arrived with MD5 [0-9a-f]{32}, '
                       r'expected 0{32}'):
        data.download(url, str(raw / name), '0' * 32)
    assert not (raw / name).exists()
    assert _leftovers(raw) == []


def test_loader_falls_back_when_a_download_has_the_wrong_md5(
        backend, online, monkeypatch, capsys):
    raw, files, _ = online
    (name, _), labels = files['train']
    monkeypatch.setitem(files, 'train', ((name, '0' * 32), labels))
    _, test = _loaded(backend, num_train=20, num_test=10)
    assert not (raw / name).exists()
    assert _leftovers(raw) == []
    out = capsys.readouterr().out
    assert 'Data: the stand-in data set, 20 training and 10 test images.' \
        in out
    assert f'expected {"0" * 32}: the download is damaged' in out  # why
    X_stand_in, y_stand_in = data.stand_in_fashion_mnist(10, seed=1)
    np.testing.assert_array_equal(_concat(test)[1], y_stand_in)


def test_unreachable_mirror_falls_back_to_the_stand_in_once(
        backend, online, monkeypatch, capsys):
    raw, _, _ = online
    monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL', 'file:///nonexistent/')
    calls = []
    original = data.download
    monkeypatch.setattr(data, 'download',
                        lambda *a, **k: calls.append(a[0]) or original(*a,
                                                                       **k))
    _, test = _loaded(backend, num_train=30, num_test=12)
    _loaded(backend, num_train=31, num_test=13)  # not from the lru cache
    out = capsys.readouterr().out
    assert out.count(NOTICE) == 1
    assert 'synthetic stand-in with 10 classes' in out
    assert 'Data: the stand-in data set, 30 training and 12 test images.' \
        in out
    # One failed attempt, then no more waiting on the network
    assert calls == ['file:///nonexistent/train-images-idx3-ubyte.gz']
    assert data._offline is True
    assert not any(raw.glob('*.gz')) and _leftovers(raw) == []
    X_stand_in, y_stand_in = data.stand_in_fashion_mnist(12, seed=1)
    X, y = _concat(test)
    np.testing.assert_array_equal(y, y_stand_in)
    np.testing.assert_array_equal(
        X, X_stand_in[:, None].astype(np.float32) / 255)


@pytest.mark.parametrize('how', ['unreachable', 'offline'])
def test_a_corrupt_cached_file_that_cannot_be_fetched(backend, online,
                                                       monkeypatch, how):
    raw, files, _ = online
    name, _ = files['train'][0]
    raw.mkdir(parents=True)
    (raw / name).write_bytes(b'garbage')
    if how == 'offline':
        monkeypatch.setenv('D2LPAR_OFFLINE', '1')
    else:
        monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL',
                           'file:///nonexistent/')
    with pytest.raises(DataError, match='corrupt or truncated') as error:
        backend.load_data_fashion_mnist(8)
    _assert_says_delete(error, raw / name)
    assert (raw / name).read_bytes() == b'garbage'  # not ours to delete


def test_files_that_disagree_on_the_number_of_examples(fresh_data, mirror,
                                                       tmp_path, monkeypatch):
    _, files, _ = mirror
    raw = tmp_path / 'cache' / 'FashionMNIST' / 'raw'
    images, labels = images_and_labels(6, 3)
    write_gz(raw / NAMES['train'][0], idx_bytes(images))
    write_gz(raw / NAMES['train'][1], idx_bytes(labels[:5]))
    monkeypatch.setitem(files, 'train', tuple(
        (n, md5(raw / n)) for n in NAMES['train']))
    monkeypatch.setattr(data, 'FASHION_MNIST_FILES', files)
    with pytest.raises(DataError, match='has 6 images but .* has 5 labels'):
        data.fetch_fashion_mnist('train', root=str(tmp_path / 'cache'))


# --------------------------------------------------------------------------
# Downloading over HTTP, from a local server that counts the requests
# --------------------------------------------------------------------------
class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def http_mirror(mirror, tmp_path, monkeypatch):
    """The files of `mirror` served over HTTP on 127.0.0.1. Returns a
    namespace: `url` (what D2LPAR_FASHION_MNIST_URL points to), `gets`
    (Counter of GET requests by path, e.g. '/t10k-images-idx3-ubyte.gz'),
    `delay` (seconds each response waits, so that concurrent clients
    overlap), `serve` (path -> bytes to send instead of the file),
    `files` and `arrays` as in `mirror`."""
    _, files, arrays = mirror
    folder = tmp_path / 'mirror'
    state = types.SimpleNamespace(gets=collections.Counter(), delay=0.0,
                                  serve={}, files=files, arrays=arrays)
    counting = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            with counting:
                state.gets[self.path] += 1
            body = state.serve.get(self.path)
            if body is None:
                file = folder / self.path.lstrip('/')
                if '/' in self.path[1:] or not file.is_file():
                    self.send_error(404)
                    return
                body = file.read_bytes()
            time.sleep(state.delay)  # a slow server; the test itself
            self.send_response(200)  # waits on processes, not on a clock
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = _Server(('127.0.0.1', 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,),
                              daemon=True)
    thread.start()
    state.url = f'http://127.0.0.1:{server.server_port}/'
    monkeypatch.setenv('no_proxy', '127.0.0.1')  # urllib honours http_proxy
    monkeypatch.delenv('http_proxy', raising=False)
    monkeypatch.delenv('HTTP_PROXY', raising=False)
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _digests(result):
    """What a downloader reports: dtype, shape and SHA-256 of each array of
    [(train images, train labels), (test images, test labels)]."""
    return [[a.dtype.str, list(a.shape),
             hashlib.sha256(a.tobytes()).hexdigest()]
            for pair in result for a in pair]


_DOWNLOADER = """
import hashlib, json, sys
from d2lpar import data
data.FASHION_MNIST_FILES = {k: tuple(map(tuple, v)) for k, v in
                            json.loads(sys.argv[1]).items()}
print('ready', flush=True)
sys.stdin.readline()  # 'go': all downloaders start at once
result = [data.fetch_fashion_mnist(s) for s in ('train', 'test')]
assert None not in result, 'fell back to the stand-in'
print(json.dumps([[a.dtype.str, list(a.shape),
                   hashlib.sha256(a.tobytes()).hexdigest()]
                  for pair in result for a in pair]))
"""


def test_concurrent_processes_fetch_each_file_once(http_mirror, tmp_path):
    """Like notebook kernels started together on one machine: three
    processes fill one empty cache. The lock file makes all but one wait,
    so every file crosses the network exactly once (without the lock each
    process fetches every file), and all get the same, right arrays."""
    http_mirror.delay = 0.2  # a request outlasts the spread of the starts
    cache = tmp_path / 'cache'
    env = dict(os.environ, D2LPAR_DATA=str(cache),
               D2LPAR_FASHION_MNIST_URL=http_mirror.url)
    env.pop('D2LPAR_OFFLINE', None)
    procs = [subprocess.Popen([sys.executable, '-c', _DOWNLOADER,
                               json.dumps(http_mirror.files)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    try:
        for p in procs:  # wait until every one has imported d2lpar
            assert select.select([p.stdout], [], [], 60)[0], 'no ready'
            assert p.stdout.readline() == 'ready\n', p.stderr.read()
        for p in procs:
            p.stdin.write('go\n')
            p.stdin.flush()
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert dict(http_mirror.gets) == {
        '/' + name: 1 for s in NAMES.values() for name in s}
    want = _digests((images, labels.astype(np.int64))
                    for images, labels in (http_mirror.arrays['train'],
                                           http_mirror.arrays['test']))
    assert [json.loads(out) for out, _ in outs] == [want] * 3
    raw = cache / 'FashionMNIST' / 'raw'
    assert sorted(os.listdir(raw)) == sorted(
        ['.lock'] + [n for s in NAMES.values() for n in s])
    for split in http_mirror.files:
        for name, md5sum in http_mirror.files[split]:
            assert md5(raw / name) == md5sum


@pytest.mark.parametrize('damage', ['another file', 'cut short'])
def test_a_damaged_download_is_refused_then_fetched_again(
        fresh_data, http_mirror, tmp_path, monkeypatch, capsys, damage):
    """The mirror sends bytes whose MD5 is wrong: a valid IDX file with
    one pixel changed (only the checksum can tell), or the first half of
    the file. download() says so and keeps nothing; the loader falls back
    (and says why); once the mirror is right, the file is fetched."""
    name, md5sum = http_mirror.files['train'][0]
    good = (tmp_path / 'mirror' / name).read_bytes()
    if damage == 'another file':
        images = http_mirror.arrays['train'][0].copy()
        images[0, 0, 0] ^= 1
        other = write_gz(tmp_path / 'other.gz', idx_bytes(images))
        data.read_idx(other)  # a valid file: only its MD5 gives it away
        bad = other.read_bytes()
    else:
        bad = good[:len(good) // 2]
    http_mirror.serve['/' + name] = bad
    monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL', http_mirror.url)
    monkeypatch.delenv('D2LPAR_OFFLINE')
    monkeypatch.setattr(data, 'FASHION_MNIST_FILES', http_mirror.files)
    root = tmp_path / 'cache'
    raw = root / 'FashionMNIST' / 'raw'
    path = raw / name

    refusal = (rf'{re.escape(http_mirror.url + name)} arrived with MD5 '
               rf'{hashlib.md5(bad).hexdigest()}, expected {md5sum}: the '
               rf'download is damaged')
    with pytest.raises(DataError, match=refusal):
        data.download(http_mirror.url + name, str(path), md5sum)
    assert not path.exists() and _leftovers(raw) == []

    assert data.fetch_fashion_mnist('train', root=str(root)) is None
    assert re.search(refusal, capsys.readouterr().out)
    assert not path.exists() and _leftovers(raw) == []
    assert data._offline is False  # a bad file is no network failure
    assert http_mirror.gets['/' + name] == 2

    del http_mirror.serve['/' + name]  # the mirror is repaired
    images, labels = data.fetch_fashion_mnist('train', root=str(root))
    assert md5(path) == md5sum and _leftovers(raw) == []
    np.testing.assert_array_equal(images, http_mirror.arrays['train'][0])
    np.testing.assert_array_equal(labels, http_mirror.arrays['train'][1])
    assert http_mirror.gets['/' + name] == 3
    data.fetch_fashion_mnist('train', root=str(root))  # from the cache
    assert sum(http_mirror.gets.values()) == 3 + 1  # + the labels, once


def test_command_line_download(online, capsys):
    from d2lpar.__main__ import main
    raw, files, _ = online
    assert main(['d2lpar', 'download']) == 0
    assert 'Fashion-MNIST is ready in' in capsys.readouterr().out
    for split in files:
        for name, md5sum in files[split]:
            assert md5(raw / name) == md5sum


def test_command_line_download_offline(online, monkeypatch, capsys):
    from d2lpar.__main__ import main
    monkeypatch.setenv('D2LPAR_FASHION_MNIST_URL', 'file:///nonexistent/')
    assert main(['d2lpar', 'download']) == 1
    assert 'Could not download Fashion-MNIST' in capsys.readouterr().out
    assert main(['d2lpar']) == 2  # usage


# --------------------------------------------------------------------------
# The cache folder
# --------------------------------------------------------------------------
@pytest.fixture
def no_env_dir(monkeypatch, tmp_path):
    """No D2LPAR_DATA; the per-user cache under tmp_path/xdg; the working
    directory tmp_path/top/work, so that ../data is tmp_path/top/data."""
    monkeypatch.delenv('D2LPAR_DATA', raising=False)
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
    work = tmp_path / 'top' / 'work'
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return tmp_path


def test_data_dir_honours_d2lpar_data(backend, monkeypatch, tmp_path):
    where = tmp_path / 'my' / 'data'
    monkeypatch.setenv('D2LPAR_DATA', str(where))
    assert backend.data_dir() == str(where)
    assert where.is_dir()


def test_data_dir_is_an_absolute_path(backend, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('D2LPAR_DATA', 'relative')
    assert backend.data_dir() == str(tmp_path / 'relative')


def test_data_dir_defaults_to_dot_dot_data(backend, no_env_dir):
    assert backend.data_dir() == str(no_env_dir / 'top' / 'data')


def _block(folder):
    """Make folder/data impossible to create: a read-only folder, or, for
    root, who may write anywhere, a regular file in its way."""
    if os.geteuid() == 0:
        (folder / 'data').write_text('in the way')
        return lambda: None
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return lambda: folder.chmod(stat.S_IRWXU)


def test_data_dir_falls_back_to_the_user_cache(backend, no_env_dir):
    unblock = _block(no_env_dir / 'top')
    try:
        assert backend.data_dir() == str(no_env_dir / 'xdg' / 'd2lpar')
    finally:
        unblock()
    assert (no_env_dir / 'xdg' / 'd2lpar').is_dir()


def test_data_dir_with_nowhere_to_write(backend, no_env_dir, monkeypatch):
    (no_env_dir / 'xdg').write_text('a file, not a folder')
    unblock = _block(no_env_dir / 'top')
    try:
        with pytest.raises(DataError, match='No writable data directory.*'
                           'set D2LPAR_DATA'):
            backend.data_dir()
    finally:
        unblock()


# --------------------------------------------------------------------------
# The stand-in data set
# --------------------------------------------------------------------------
def test_stand_in_is_deterministic():
    X1, y1 = data.stand_in_fashion_mnist(300, seed=0)
    X2, y2 = data.stand_in_fashion_mnist(300, seed=0)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    X3, _ = data.stand_in_fashion_mnist(300, seed=1)
    assert not np.array_equal(X1, X3)


def test_stand_in_looks_like_fashion_mnist():
    X, y = data.stand_in_fashion_mnist(1000, seed=0)
    assert X.shape == (1000, 28, 28) and X.dtype == np.uint8
    assert y.shape == (1000,) and y.dtype == np.int64
    assert sorted(set(y.tolist())) == list(range(10))
    assert X.min() == 0 and X.max() == 255


def test_stand_in_classes_differ():
    """Each class is its own pattern: the class means are far apart."""
    X, y = data.stand_in_fashion_mnist(2000, seed=0)
    means = np.stack([X[y == c].mean(axis=0) for c in range(10)])
    distances = np.linalg.norm(
        (means[:, None] - means[None, :]).reshape(100, -1), axis=1)
    off_diagonal = distances.reshape(10, 10)[~np.eye(10, dtype=bool)]
    assert off_diagonal.min() > 100


# --------------------------------------------------------------------------
# The loaders of the backends (offline: the stand-in)
# --------------------------------------------------------------------------
def test_loader_batches(backend):
    train_iter, test_iter = backend.load_data_fashion_mnist(
        32, num_train=100, num_test=50)
    assert len(train_iter) == 3 and len(test_iter) == 2
    train = [(backend.numpy(X), backend.numpy(y)) for X, y in train_iter]
    test = [(backend.numpy(X), backend.numpy(y)) for X, y in test_iter]
    # The training iterator drops the last partial batch, the test one not
    assert [len(y) for _, y in train] == [32, 32, 32]
    assert [len(y) for _, y in test] == [32, 18]
    for X, y in train + test:
        assert X.shape == (len(y), 1, 28, 28)
        assert X.dtype == np.float32
        assert 0 <= X.min() and X.max() <= 1
        assert np.issubdtype(y.dtype, np.integer) and y.ndim == 1
        assert set(y.tolist()) <= set(range(10))
    # Offline the data is the stand-in: training seed 0, test seed 1
    X_te, y_te = data.stand_in_fashion_mnist(50, seed=1)
    X, y = _concat(test)
    np.testing.assert_array_equal(X, X_te[:, None].astype(np.float32) / 255)
    np.testing.assert_array_equal(y, y_te)
    # A training epoch has distinct examples of the training set
    X_tr, y_tr = data.stand_in_fashion_mnist(100, seed=0)
    rows = {x.tobytes(): label for x, label in
            zip(X_tr[:, None].astype(np.float32) / 255, y_tr)}
    X, y = _concat(train)
    keys = [x.tobytes() for x in X]
    assert len(set(keys)) == 96
    assert [rows[k] for k in keys] == y.tolist()


def test_training_iterator_shuffles_every_epoch(backend):
    train_iter, test_iter = backend.load_data_fashion_mnist(
        10, num_train=60, num_test=20)
    epochs = [np.concatenate([backend.numpy(y) for _, y in train_iter])
              for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1])
    assert epochs[0].tolist() != epochs[1].tolist()
    tests = [np.concatenate([backend.numpy(y) for _, y in test_iter])
             for _ in range(2)]
    np.testing.assert_array_equal(tests[0], tests[1])  # in order


def test_loader_rejects_a_batch_size_below_one(backend):
    with pytest.raises(ValueError, match='batch_size must be at least 1'):
        backend.load_data_fashion_mnist(0, num_train=10, num_test=10)


def test_training_on_fewer_examples_than_one_batch_is_refused(backend):
    with pytest.raises(ValueError, match='20 training examples do not fill '
                                         'one minibatch of 256.*at least 256'):
        train_iter, _ = backend.load_data_fashion_mnist(256, num_train=20,
                                                        num_test=10)
        next(iter(train_iter))
