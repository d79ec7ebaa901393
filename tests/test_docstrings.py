"""The docstrings of the lessons' functions are in the lesson's language
(issue 34). The package keeps one docstring per function, the English
lesson's: tools/library.py copies the #@save code of the English lessons
only, and the test that compares code across languages ignores strings,
so a translated lesson may (and must) say in its own words what its
functions do."""
import ast
import pathlib

import pytest

NB = pathlib.Path(__file__).resolve().parent.parent / 'notebooks'
CHAPTERS = sorted(p.stem for p in (NB / 'en').glob('*.md'))
FENCE = '```{.python .input}'


def docstrings(lang, chapter):
    """{(code cell number, tab, name, number of the definition of that
    name in the cell): docstring} of the functions and classes of a
    lesson source (solutions included). The code cells stand in the same
    order in every language."""
    found = {}
    lines = (NB / lang / f'{chapter}.md').read_text(
        encoding='utf-8').splitlines()
    starts = [n for n, line in enumerate(lines) if line.strip() == FENCE]
    for cell, n in enumerate(starts):
        end = lines.index('```', n + 1)
        tab = lines[n + 1].split()[-1]
        tree = ast.parse('\n'.join(lines[n + 2:end]))
        seen = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                seen[node.name] = seen.get(node.name, 0) + 1
                text = ast.get_docstring(node)
                if text:
                    found[cell, tab, node.name, seen[node.name]] = text
    return found


@pytest.mark.parametrize('chapter', CHAPTERS)
@pytest.mark.parametrize('lang', ['fr', 'tr', 'zh'])
def test_the_docstrings_are_in_the_lessons_language(lang, chapter):
    english = docstrings('en', chapter)
    mine = docstrings(lang, chapter)
    assert mine.keys() == english.keys(), \
        f'{lang}/{chapter}: not the same documented functions as in English'
    left = sorted(key[2] for key in english if mine[key] == english[key])
    assert not left, (f'{lang}/{chapter}.md: the docstrings of {left} are '
                      f'still the English ones; translate them')
