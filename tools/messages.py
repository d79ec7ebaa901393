"""The message catalogs of d2lpar, with Babel (``make messages``).

Usage::

    python tools/messages.py           # extract, update, compile
    python tools/messages.py extract   # only d2lpar/locale/d2lpar.pot

1. extract: every string marked in d2lpar (``_``, ``N_``, ``ngettext``,
   ``Message``, ``error_message``; see d2lpar/i18n.py), plus the comments
   of the training scripts' ``main`` (babel.cfg), into
   ``d2lpar/locale/d2lpar.pot``;
2. update: merge the template into ``d2lpar/locale/<lang>/LC_MESSAGES/
   d2lpar.po`` (fr, tr, zh): new messages arrive untranslated, changed
   ones fuzzy; translate them there;
3. compile: write the ``.mo`` files next to them (committed, shipped as
   package data).

tests/test_i18n.py fails while a step is left undone.
"""
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCALE = ROOT / 'd2lpar' / 'locale'
POT = LOCALE / 'd2lpar.pot'
DOMAIN = 'd2lpar'
LANGUAGES = ('fr', 'tr', 'zh')
KEYWORDS = ('Message', 'error_message')


def pybabel(*args):
    """Run a pybabel command in this process (babel.cfg names an
    extraction method of d2lpar, so d2lpar must be importable)."""
    from babel.messages.frontend import CommandLineInterface
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    here = os.getcwd()
    os.chdir(ROOT)  # the paths in the catalogs are relative to it
    try:
        return CommandLineInterface().run(['pybabel', '--quiet', *args])
    finally:
        os.chdir(here)


def extract(pot=POT):
    """Write the template of every message of d2lpar to `pot`."""
    keywords = [arg for k in KEYWORDS for arg in ('-k', k)]
    version = {}
    exec((ROOT / 'd2lpar' / '__init__.py').read_text(), version)
    return pybabel('extract', '-F', 'babel.cfg', *keywords,
                   '--add-comments', 'TRANSLATORS:', '--project', 'd2lpar',
                   '--version', version['__version__'],
                   '--copyright-holder', 'the d2lpar authors',
                   '--no-wrap', '--sort-by-file', '--add-location', 'file',
                   # not the default '.* ._': d2lpar/_torch, _mxnet count
                   '--ignore-dirs', '.* __pycache__',
                   '-o', str(pot), 'd2lpar')


def update():
    return pybabel('update', '-i', str(POT), '-d', str(LOCALE), '-D',
                   DOMAIN, '--no-wrap', '--ignore-obsolete')


def compile_catalogs():
    return pybabel('compile', '-d', str(LOCALE), '-D', DOMAIN,
                   '--statistics')


def main(argv):
    steps = {'extract': [extract], 'update': [update],
             'compile': [compile_catalogs],
             'all': [extract, update, compile_catalogs]}
    step_name = argv[1] if len(argv) > 1 else 'all'
    if step_name not in steps:
        print(f'usage: {argv[0]} [extract|update|compile|all]')
        return 2
    for step in steps[step_name]:
        if step():
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
