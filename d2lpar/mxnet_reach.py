"""Where MXNet 1.9.1 runs, and what a student sees where it cannot.

`shims` makes MXNet 1.9.1 import on today's Pythons and numpys: it is
called before every ``import mxnet`` of d2lpar (d2lpar._mxnet, and the
training scripts of lesson 4, which import MXNet before anything else).

- ``numpy.bool``: MXNet 1.9.1 reads it while it is imported; numpy 1.24 to
  1.26 removed that alias of ``bool`` (numpy 2 brought it back, but MXNet
  1.9.1 needs numpy<2).
- ``distutils``: MXNet imports it; Python 3.12 no longer has it, and
  setuptools (the ``mxnet`` extra installs it there) brings its own copy.

`require_mxnet` imports MXNet, or, where it is not installed (Python 3.13
and later, macOS on Apple silicon, Windows: MXNet 1.9.1 has wheels only
for Linux x86-64 with Python 3.8 to 3.12), raises `MXNetUnavailable`: one
sentence in the student's language that says why and which notebook to
open instead. In Jupyter the sentence is all the cell shows (IPython shows
what ``_render_traceback_`` returns instead of the traceback).

Only the standard library is imported here (numpy in `shims`).
"""
import importlib.util
import os
import platform
import sys

from d2lpar import i18n
from d2lpar.i18n import Message

# Linux x86-64, Python 3.8 to 3.12: where PyPI has a wheel of MXNet 1.9.1
WHEELS = (('Linux', 'x86_64'),)
NEWEST_PYTHON = (3, 12)


def shims():
    """Make ``import mxnet`` (1.9.1) work with numpy 1.24 and later and on
    Python 3.12; harmless where it is not needed."""
    import numpy
    try:
        numpy.bool
    except AttributeError:  # numpy 1.24 to 1.26
        numpy.bool = bool
    if sys.version_info >= (3, 12) and 'distutils' not in sys.modules:
        try:
            import distutils  # noqa: F401 (setuptools' copy, through its .pth)
        except ImportError:
            try:
                import setuptools  # noqa: F401 (puts its distutils in place)
            except ImportError:
                pass  # MXNet's own ImportError then names distutils


def mxnet_installed():
    """Whether an ``import mxnet`` would find MXNet."""
    return importlib.util.find_spec('mxnet') is not None


def where_mxnet_installs(system=None, machine=None, version=None):
    """Whether PyPI has a wheel of MXNet 1.9.1 for this machine."""
    system = system or platform.system()
    machine = machine or platform.machine()
    version = version or sys.version_info[:2]
    return (system, machine) in WHEELS and tuple(version) <= NEWEST_PYTHON


def _notebook():
    """The path of the notebook this kernel runs, where Jupyter or VS Code
    tells it (JPY_SESSION_NAME, __vsc_ipynb_file__), else None."""
    path = os.environ.get('JPY_SESSION_NAME')
    if not path:
        main = sys.modules.get('__main__')
        path = getattr(main, '__vsc_ipynb_file__', None)
    return path or None


def _language(notebook):
    """The student's language: D2LPAR_LANG, else the language folder of
    the notebook (notebooks/<lang>/mxnet/...), else English."""
    if os.environ.get(i18n.ENVIRONMENT):
        return i18n.language()
    if notebook:
        parts = notebook.replace('\\', '/').split('/')
        for lang in i18n.LANGUAGES:
            if lang in parts[:-1]:
                return lang
    return 'en'


def unavailable_message(notebook=None):
    """The `Message` that says why MXNet cannot run here and which PyTorch
    notebook to open instead."""
    system = {'Darwin': 'macOS'}.get(platform.system(), platform.system())
    here = f'{system} {platform.machine()}, Python {platform.python_version()}'
    if notebook:
        name = notebook.replace('\\', '/').rsplit('/', 1)[-1]
        return Message(
            'MXNet is not installed here, and MXNet 1.9.1 has wheels only '
            'for Linux x86-64 with Python 3.8 to 3.12 (this is {here}): '
            'open the PyTorch notebook of this lesson instead, {notebook}.',
            here=here, notebook=f'../pytorch/{name}')
    return Message(
        'MXNet is not installed here, and MXNet 1.9.1 has wheels only for '
        'Linux x86-64 with Python 3.8 to 3.12 (this is {here}): open the '
        'PyTorch notebook of this lesson instead, the notebook of the same '
        'name in {folder}.', here=here, folder='../pytorch/')


class MXNetUnavailable(ImportError):
    """MXNet cannot be imported here. ``str()`` gives the sentence in the
    student's language (then ``(en)`` and the English one, as every error
    of d2lpar); Jupyter shows the sentence alone, without a traceback."""

    def __init__(self, sentence, text):
        super().__init__(text, name='mxnet')
        self.sentence = sentence

    def _render_traceback_(self):
        return [self.sentence]


def unavailable(notebook=None):
    """The `MXNetUnavailable` to raise in this kernel."""
    notebook = notebook or _notebook()
    message = unavailable_message(notebook)
    saved = os.environ.get(i18n.ENVIRONMENT)
    os.environ[i18n.ENVIRONMENT] = _language(notebook)
    try:
        return MXNetUnavailable(message.render(), i18n.bilingual(message))
    finally:
        if saved is None:
            del os.environ[i18n.ENVIRONMENT]
        else:
            os.environ[i18n.ENVIRONMENT] = saved


def require_mxnet():
    """Import MXNet after its shims and return it, or raise
    `MXNetUnavailable` where it is not installed."""
    if not mxnet_installed():
        raise unavailable() from None
    shims()
    import mxnet
    return mxnet
