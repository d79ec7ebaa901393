"""Fonts for the plots of the lessons: Chinese text without missing glyphs.

matplotlib draws text with DejaVu Sans, which has the Latin letters of the
four lessons (French é à ç, Turkish ğ ş ı İ) but no Chinese characters: a
Chinese title, label or legend came out as empty boxes, with the warning
"Glyph ... missing from current font". The pins install `mplfonts`
(requirements-nodeps.txt), which ships Noto Sans CJK SC as a font file.
`use_cjk_font()` registers that file with matplotlib's font manager, in
memory only (no download, nothing written into site-packages or the
matplotlib cache, unlike `mplfonts init`), and appends its family to
``font.family``: matplotlib (3.6 and later) takes each character from the
first family of that list that has it, so Latin text is drawn exactly as
before and Chinese text falls back to Noto Sans CJK SC.

Every d2lpar helper that draws calls it first, and so do `d2lpar.torch`
and `d2lpar.mxnet` when they are imported (the book's `d2l` package, which
they import, has loaded matplotlib already; registering costs a few
milliseconds), so that the plots a lesson draws with `plt` itself get the
font too. Nothing here imports matplotlib before a caller does.
"""
import importlib.util
import os
import sys
import warnings

from d2lpar.i18n import error_message

CJK_FAMILY = 'Noto Sans CJK SC'
CJK_FILE = 'NotoSansCJKsc-Regular.otf'

_registered = []  # the path of the registered file, once it is


def cjk_font_path():
    """The Noto Sans CJK SC file that mplfonts ships, or None when the
    package is missing (found without importing it)."""
    try:
        spec = importlib.util.find_spec('mplfonts')
    except (ImportError, ValueError):
        return None
    for folder in (spec and spec.submodule_search_locations) or ():
        path = os.path.join(folder, 'fonts', CJK_FILE)
        if os.path.isfile(path):
            return path
    return None


def use_cjk_font():
    """Make matplotlib draw CJK characters with Noto Sans CJK SC.

    Registers the font file once, then (at every call, so that a style
    reset such as ``plt.style.use('default')`` is repaired before the
    next d2lpar plot) makes sure ``font.family`` ends with its family.
    Returns the font file's path, or None (with a warning, once) when
    mplfonts is not installed."""
    import matplotlib
    from matplotlib import font_manager
    if not _registered:
        path = cjk_font_path()
        if path is None:
            warnings.warn(error_message(
                'The package mplfonts is not installed, so plots show '
                'Chinese characters as empty boxes. Install it without its '
                'dependencies (it asks for a newer numpy than the pins): '
                '`pip install --no-deps -r requirements-nodeps.txt`.'),
                stacklevel=2)
            _registered.append(None)
        else:
            font_manager.fontManager.addfont(path)
            _registered.append(path)
    if _registered[0] is None:
        return None
    family = matplotlib.rcParams['font.family']
    family = [family] if isinstance(family, str) else list(family)
    if CJK_FAMILY not in family:
        matplotlib.rcParams['font.family'] = family + [CJK_FAMILY]
    return _registered[0]


def use_cjk_font_if_loaded():
    """`use_cjk_font()` if matplotlib is already imported; else nothing
    (the first d2lpar plot will call it)."""
    if 'matplotlib' in sys.modules:
        return use_cjk_font()
    return None
