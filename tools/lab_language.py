"""The language of JupyterLab's menus for `make lab` (standard library only).

    python tools/lab_language.py [CHOICE]

prints a folder to put in front of JUPYTER_CONFIG_PATH. CHOICE (what
`make lab LAB_LANG=...` passes) is fr, tr, zh or en, or a locale such as
zh_CN.UTF-8; without it the machine's locale decides: the first of
LC_ALL, LC_MESSAGES and LANG that is set (the order the C library reads
them for messages). A language with no pack installed (de, ja, C, POSIX)
gives English.

How JupyterLab 4 picks its language: the setting `locale` of the plugin
@jupyterlab/translation-extension:plugin, whose default, "default", means
the server's own locale, which Python reads once from the environment and
which is en_US on a machine where that locale is not generated (the
common case in containers). So the choice is written as a default setting
override, `labconfig/default_setting_overrides.json`, in a folder under
build/ that the server reads through JUPYTER_CONFIG_PATH. Nothing is
written into the user's home or the venv; a language the student picks in
Settings > Language is saved in their own settings and wins over this
default (Settings Editor > Language > Restore to Defaults undoes it).
"""
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLUGIN = '@jupyterlab/translation-extension:plugin'
# language -> the locale of its pack (requirements/lock-py3.X.txt); en is
# built in
PACKS = {'fr': 'fr_FR', 'tr': 'tr_TR', 'zh': 'zh_CN', 'en': 'en'}
LOCALE_VARIABLES = ('LC_ALL', 'LC_MESSAGES', 'LANG')


def language_of(value):
    """'zh_CN.UTF-8' -> 'zh'; 'fr' -> 'fr'; 'C' or '' -> 'c' or ''."""
    return value.split('.')[0].split('@')[0].replace('-', '_') \
        .split('_')[0].lower()


def machine_locale(environ=os.environ):
    """The locale the C library uses for messages: the first of LC_ALL,
    LC_MESSAGES, LANG that is set and not empty ('' when none is)."""
    for name in LOCALE_VARIABLES:
        if environ.get(name):
            return environ[name]
    return ''


def lab_locale(choice='', environ=os.environ):
    """The locale JupyterLab should use: a pack's (fr_FR, tr_TR, zh_CN) or
    'en'. An explicit `choice` must name one of them; the machine's locale
    falls back to English when no pack matches."""
    if choice:
        language = language_of(choice)
        if language not in PACKS:
            raise ValueError(
                f'LAB_LANG={choice!r}: JupyterLab has a language pack here '
                f'for {", ".join(sorted(PACKS))} only')
        return PACKS[language]
    return PACKS.get(language_of(machine_locale(environ)), 'en')


def write_config(locale, root=ROOT):
    """The folder (build/jupyter-language/<locale>) whose labconfig sets
    the default of JupyterLab's `locale` setting."""
    folder = root / 'build' / 'jupyter-language' / locale
    path = folder / 'labconfig' / 'default_setting_overrides.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({PLUGIN: {'locale': locale}}, indent=2) + '\n'
    if not path.exists() or path.read_text(encoding='utf-8') != text:
        path.write_text(text, encoding='utf-8')
    return folder


def main(argv):
    choice = argv[1] if len(argv) > 1 else ''
    try:
        locale = lab_locale(choice)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    how = (f'LAB_LANG={choice}' if choice else
           f'the locale {machine_locale() or "(none set)"}')
    print(f'JupyterLab in {locale}, from {how} (make lab LAB_LANG=fr, tr, '
          f'zh or en chooses)', file=sys.stderr)
    print(write_config(locale))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
